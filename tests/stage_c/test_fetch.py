"""Every fetch outcome class with its name: file:// roots, the host allow-list, HTTP statuses, limits.

Each result says whose problem it is: ``failed`` (the host's), ``rejected`` (the upload's own) or
``config-refused`` (the settings', naming the variable to change)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from stage_e_dagster.stage_c.fetch import FetchLockout

from .conftest import make_fetcher


@pytest.fixture
def roots(tmp_path: Path, card_jpeg: bytes) -> Path:
    root = tmp_path / "images"
    root.mkdir()
    (root / "card.jpg").write_bytes(card_jpeg)
    (tmp_path / "secret.jpg").write_bytes(card_jpeg)
    return root


def test_file_inside_root_is_read(roots: Path, card_jpeg: bytes) -> None:
    with make_fetcher(None, [roots]) as fetcher:
        result = fetcher.fetch((roots / "card.jpg").as_uri())
    assert (result.outcome, result.data) == ("ok", card_jpeg)


def test_missing_file_is_not_found(roots: Path) -> None:
    with make_fetcher(None, [roots]) as fetcher:
        result = fetcher.fetch((roots / "nope.jpg").as_uri())
    assert (result.outcome, result.error_class, result.transient) == ("rejected", "not-found", False)


def test_a_file_outside_every_root_is_refused_by_the_settings(roots: Path) -> None:
    with make_fetcher(None, [roots]) as fetcher:
        result = fetcher.fetch((roots.parent / "secret.jpg").as_uri())
    assert (result.outcome, result.error_class, result.setting) == (
        "config-refused", "outside-image-roots", "STAGE_E_IMAGE_ROOTS")
    assert result.data is None and "STAGE_E_IMAGE_ROOTS" in (result.detail or "")


def test_traversal_out_of_the_root_is_the_uploads_own_problem(roots: Path) -> None:
    with make_fetcher(None, [roots]) as fetcher:
        result = fetcher.fetch(f"file://{roots}/../secret.jpg")
    assert (result.outcome, result.error_class, result.data) == ("rejected", "escapes-image-roots", None)


def test_symlink_escape_is_the_uploads_own_problem(roots: Path) -> None:
    os.symlink(roots.parent / "secret.jpg", roots / "link.jpg")
    with make_fetcher(None, [roots]) as fetcher:
        result = fetcher.fetch((roots / "link.jpg").as_uri())
    assert (result.outcome, result.error_class, result.data) == ("rejected", "escapes-image-roots", None)


def test_a_root_given_through_a_symlink_covers_locators_written_under_it(roots: Path, card_jpeg: bytes) -> None:
    alias = roots.parent / "alias"
    os.symlink(roots, alias)
    with make_fetcher(None, [alias]) as fetcher:
        assert fetcher.fetch((alias / "card.jpg").as_uri()).data == card_jpeg
        assert fetcher.fetch((roots / "card.jpg").as_uri()).data == card_jpeg


def test_locators_no_setting_could_allow_are_the_uploads_own_problem(roots: Path) -> None:
    with make_fetcher(None, [roots], ["example.org"]) as fetcher:
        for locator in (f"file://evil.example{roots}/card.jpg", "ftp://example.org/card.jpg", "file:card.jpg",
                        "http:///card.jpg"):
            result = fetcher.fetch(locator)
            assert (result.outcome, result.error_class) == ("rejected", "unsupported-locator"), locator


def test_oversized_file_is_too_large(roots: Path) -> None:
    (roots / "big.jpg").write_bytes(b"\xff" * 300_000)
    with make_fetcher(None, [roots]) as fetcher:
        result = fetcher.fetch((roots / "big.jpg").as_uri())
    assert (result.outcome, result.error_class) == ("rejected", "too-large")


def host_of(url: str) -> str:
    return url.split("//", 1)[1]


def test_http_ok_from_an_allowed_host(image_host: str, card_jpeg: bytes) -> None:
    with make_fetcher(None, [], [host_of(image_host)]) as fetcher:
        result = fetcher.fetch(f"{image_host}/card.jpg")
    assert (result.outcome, result.data, result.status_code) == ("ok", card_jpeg, 200)


def test_host_not_on_the_allow_list_is_never_contacted(image_host: str) -> None:
    with make_fetcher(None, [], ["images.example.org"]) as fetcher:
        result = fetcher.fetch(f"{image_host}/card.jpg")
    assert (result.outcome, result.error_class, result.status_code) == ("config-refused", "host-not-allowed", None)
    assert result.setting == "STAGE_E_FETCH_ALLOWED_HOSTS" and host_of(image_host) in (result.detail or "")


def test_redirects_are_rechecked(image_host: str, card_jpeg: bytes) -> None:
    with make_fetcher(None, [], [host_of(image_host)]) as fetcher:
        assert fetcher.fetch(f"{image_host}/hop.jpg").data == card_jpeg
        escape = fetcher.fetch(f"{image_host}/escape.jpg")
        loop = fetcher.fetch(f"{image_host}/loop.jpg")
    # The upload's URL sent us off the allow-list: the upload's doing, not a setting to widen.
    assert (escape.outcome, escape.error_class, escape.host) == ("rejected", "redirect-not-allowed", "images.invalid")
    assert escape.setting is None
    assert (loop.outcome, loop.error_class) == ("failed", "too-many-redirects")


@pytest.mark.parametrize(
    ("path", "outcome", "error_class", "transient"),
    [
        # a 404 or another unexpected 4xx is the host's answer: host trouble, it counts
        ("/missing.jpg", "failed", "not-found", False),
        ("/bad-request.jpg", "failed", "http-error", False),
        ("/busy.jpg", "throttled", None, False),
        ("/unavailable.jpg", "throttled", None, False),
        ("/broken.jpg", "failed", "server-error", True),
        ("/slow.jpg", "failed", "timeout", True),
        # the upload's own problem
        ("/huge.jpg", "rejected", "too-large", False),
        ("/huge-unsized.jpg", "rejected", "too-large", False),
    ],
)
def test_http_outcomes(image_host: str, path: str, outcome: str, error_class: str | None, transient: bool) -> None:
    with make_fetcher(None, [], [host_of(image_host)]) as fetcher:
        result = fetcher.fetch(image_host + path)
    assert (result.outcome, result.error_class, result.transient) == (outcome, error_class, transient)


def test_429_carries_retry_after(image_host: str) -> None:
    with make_fetcher(None, [], [host_of(image_host)]) as fetcher:
        assert fetcher.fetch(f"{image_host}/busy.jpg").retry_after_s == 3.0
        dated = fetcher.fetch(f"{image_host}/busy-date.jpg")  # an HTTP date five minutes ahead
    assert dated.outcome == "throttled" and 280 <= (dated.retry_after_s or 0) <= 301


def test_403_raises_lockout(image_host: str) -> None:
    with make_fetcher(None, [], [host_of(image_host)]) as fetcher, pytest.raises(FetchLockout) as caught:
        fetcher.fetch(f"{image_host}/forbidden.jpg")
    assert caught.value.status_code == 403 and caught.value.host == "127.0.0.1"


def test_connection_refused_is_a_connection_error() -> None:
    with make_fetcher(None, [], ["127.0.0.1:9"]) as fetcher:
        result = fetcher.fetch("http://127.0.0.1:9/card.jpg")
    assert (result.outcome, result.error_class, result.transient) == ("failed", "connection-error", True)
