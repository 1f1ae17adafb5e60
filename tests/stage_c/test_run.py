"""run_stage_c end to end on both back ends: evidence, skips, terminal records, lockout, throttling
and its backoff, refusals by the settings, retry budget, manifest staleness and image changes."""

from __future__ import annotations

import io
import logging
import time
from datetime import timedelta
from functools import partial
from pathlib import Path

import pytest
import sqlalchemy as sa
from PIL import Image
from sqlalchemy.orm import Session

from stage_e_dagster.catalog.backlog import STAGE_C_PENDING, requeue_config_refused, waiting_on_configuration
from stage_e_dagster.catalog.base import utcnow
from stage_e_dagster.catalog.engine import session_scope
from stage_e_dagster.catalog.models import Card, FetchOutcome, ImageEvidence
from stage_e_dagster.defs.contention import has_unclaimed
from stage_e_dagster.stage_c.backlog import mark_image_changed
from stage_e_dagster.stage_c.compute import locator_key, sha256_hex
from stage_e_dagster.stage_c.fetch import REFUSING_SETTINGS
from stage_e_dagster.stage_c.manifest import MANIFEST_VERSIONS
from stage_e_dagster.stage_c.persist import THROTTLE_BASE_S, THROTTLE_CAP_S
from stage_e_dagster.stage_c.rollout import rollout_step
from stage_e_dagster.stage_c.run import run_stage_c as _run_stage_c

from .conftest import make_fetcher

# What is under test here is the run around the reader (fetches, outcomes, stops, throttles, staleness), not
# what the reader reads: its cheap pass (settings.ocr_pass, as in every test through settings) keeps
# each card short. The full pass is for the reader's own tests (test_text_reader.py, stage_d/test_corpus.py).
run_stage_c = partial(_run_stage_c, ocr_pass="cheap")


def add_card(engine: sa.Engine, locator: str, *, name: str = "Card", declared: str | None = None) -> int:
    with engine.begin() as conn:
        return int(conn.execute(
            sa.insert(Card).values(identifier=f"id-{locator}", name=name, image_locator=locator,
                                   declared_content_hash=declared).returning(Card.id)
        ).scalar_one())


def card(engine: sa.Engine, card_id: int) -> Card:
    with Session(engine) as s:
        return s.get(Card, card_id)


def evidence(engine: sa.Engine, card_id: int) -> list[ImageEvidence]:
    with Session(engine) as s:
        return list(s.execute(sa.select(ImageEvidence).where(ImageEvidence.card_id == card_id)).scalars())


def outcomes(engine: sa.Engine) -> list[tuple[str, int | None]]:
    with Session(engine) as s:
        rows = s.execute(sa.select(FetchOutcome.outcome, FetchOutcome.card_id).order_by(FetchOutcome.id))
        return [tuple(r) for r in rows]


@pytest.fixture
def root(tmp_path: Path, card_jpeg: bytes) -> Path:
    root = tmp_path / "images"
    root.mkdir()
    (root / "good.jpg").write_bytes(card_jpeg)
    (root / "trunc.jpg").write_bytes(card_jpeg[: len(card_jpeg) // 2])
    (root / "html.jpg").write_bytes(b"<html>error</html>")
    bomb = io.BytesIO()
    Image.new("1", (9000, 9000)).save(bomb, format="PNG")
    (root / "bomb.png").write_bytes(bomb.getvalue())
    return root


def test_good_card_gets_current_evidence_and_is_never_fetched_again(engine: sa.Engine, root: Path,
                                                                     card_jpeg: bytes) -> None:
    cid = add_card(engine, (root / "good.jpg").as_uri())
    with make_fetcher(engine, [root]) as fetcher:
        first = run_stage_c(engine, [cid], writer="dispatch:r1", run_id="r1", fetcher=fetcher, lexicon=frozenset())
        again = run_stage_c(engine, [cid], writer="dispatch:r2", run_id="r2", fetcher=fetcher, lexicon=frozenset())
        backlog = run_stage_c(engine, None, writer="bulk:b", run_id=None, fetcher=fetcher, lexicon=frozenset())
    assert (first.attempted, first.completed, first.terminal) == (1, 1, 0)
    assert (again.attempted, again.skipped_current, again.completed) == (1, 1, 0)
    assert backlog.attempted == 0
    assert outcomes(engine) == [("ok", cid)]  # exactly one fetch in three runs
    c = card(engine, cid)
    assert (c.content_hash, c.stage_c_pending, c.stage_d_pending, c.evidence_writer) == (
        sha256_hex(card_jpeg), False, True, "dispatch:r1")
    [row] = evidence(engine, cid)
    assert row.extractor_versions == dict(MANIFEST_VERSIONS) and row.writer == "dispatch:r1" and row.run_id == "r1"


def test_declared_hash_with_current_evidence_is_not_fetched(engine: sa.Engine, root: Path, card_jpeg: bytes) -> None:
    first = add_card(engine, (root / "good.jpg").as_uri())
    with make_fetcher(engine, [root]) as fetcher:
        run_stage_c(engine, [first], writer="w", run_id=None, fetcher=fetcher, lexicon=frozenset())
        # A writer re-points the card at a file it declares by hash; the evidence for that hash exists.
        with Session(engine) as s, s.begin():
            mark_image_changed(s, first, declared_content_hash=sha256_hex(card_jpeg))
        report = run_stage_c(engine, [first], writer="w", run_id=None, fetcher=fetcher, lexicon=frozenset())
    assert report.skipped_current == 1 and len(outcomes(engine)) == 1
    assert card(engine, first).stage_c_pending is False


@pytest.mark.parametrize(
    ("name", "error", "truncated"),
    [("missing.jpg", "not-found", False), ("trunc.jpg", "truncated-image", False),
     ("html.jpg", "not-an-image", False), ("bomb.png", "decompression-bomb", False)],
)
def test_bad_files_become_terminal_records_once(engine: sa.Engine, root: Path, name: str, error: str,
                                                truncated: bool) -> None:
    cid = add_card(engine, (root / name).as_uri())
    with make_fetcher(engine, [root]) as fetcher:
        report = run_stage_c(engine, [cid], writer="w", run_id=None, fetcher=fetcher, lexicon=frozenset())
        again = run_stage_c(engine, None, writer="w", run_id=None, fetcher=fetcher, lexicon=frozenset())
    # The upload's own problem: a terminal record, and a fetch outcome that is not a failure.
    assert (report.completed, report.terminal, report.rejected, report.fetch_failures) == (1, 1, 1, 0)
    assert again.attempted == 0
    [row] = evidence(engine, cid)
    assert row.terminal and row.fetch_ok is False and row.fetch_error_class == error
    assert set(row.skip_reasons.values()) == {error} and row.extractor_versions == dict(MANIFEST_VERSIONS)
    assert row.is_truncated is (error == "truncated-image")
    assert outcomes(engine) == [("rejected", cid)]
    if name == "missing.jpg":
        assert row.content_hash == locator_key((root / name).as_uri())
    assert card(engine, cid).stage_c_pending is False


def test_missing_file_comes_back_when_the_image_changes(engine: sa.Engine, root: Path, card_jpeg: bytes) -> None:
    cid = add_card(engine, (root / "later.jpg").as_uri())
    with make_fetcher(engine, [root]) as fetcher:
        run_stage_c(engine, [cid], writer="w", run_id=None, fetcher=fetcher, lexicon=frozenset())
        (root / "later.jpg").write_bytes(card_jpeg)
        assert run_stage_c(engine, [cid], writer="w", run_id=None, fetcher=fetcher,
                           lexicon=frozenset()).skipped_current == 1
        with Session(engine) as s, s.begin():
            mark_image_changed(s, cid)
        report = run_stage_c(engine, None, writer="w", run_id=None, fetcher=fetcher, lexicon=frozenset())
    assert (report.completed, report.terminal) == (1, 0)
    rows = {r.content_hash: r for r in evidence(engine, cid)}
    assert set(rows) == {locator_key((root / "later.jpg").as_uri()), sha256_hex(card_jpeg)}
    assert card(engine, cid).content_hash == sha256_hex(card_jpeg)


def test_http_lockout_stops_stage_c(engine: sa.Engine, image_host: str) -> None:
    host = image_host.split("//", 1)[1]
    ids = [add_card(engine, f"{image_host}/card.jpg?n={i}") for i in range(2)]
    ids.insert(1, add_card(engine, f"{image_host}/forbidden.jpg"))
    with make_fetcher(engine, [], [host]) as fetcher:
        report = run_stage_c(engine, ids, writer="w", run_id="r", fetcher=fetcher, lexicon=frozenset())
    assert report.lockout is not None and report.lockout.status_code == 403 and report.lockout.card_id == ids[1]
    assert (report.attempted, report.completed) == (2, 1)
    assert report.deferred_card_ids == ids[1:]
    assert outcomes(engine) == [("ok", ids[0]), ("lockout", ids[1])]
    assert evidence(engine, ids[1]) == [] and card(engine, ids[2]).stage_c_pending is True


@pytest.mark.parametrize("path", ["/busy.jpg", "/unavailable.jpg"])
def test_throttled_cards_are_deferred_not_failed(engine: sa.Engine, image_host: str, path: str) -> None:
    cid = add_card(engine, image_host + path)
    with make_fetcher(engine, [], [image_host.split("//", 1)[1]]) as fetcher:
        report = run_stage_c(engine, [cid], writer="w", run_id=None, fetcher=fetcher, lexicon=frozenset())
    assert (report.throttled, report.fetch_failures, report.deferred_card_ids) == (1, 0, [cid])
    c = card(engine, cid)
    assert evidence(engine, cid) == [] and c.stage_c_pending is True
    assert outcomes(engine) == [("throttled", cid)]
    assert c.throttle_count == 1 and c.next_eligible_at is not None
    with engine.connect() as conn:  # the shared pacer backed off for every process
        scale, next_slot = conn.execute(sa.text("SELECT interval_scale, next_slot_at FROM fetch_pacer")).one()
    assert scale == 2.0
    if path == "/busy.jpg":  # the host said Retry-After: 3
        assert next_slot > time.time() + 1.5


@pytest.mark.parametrize(
    ("path", "error", "outcome"),
    [("/missing.jpg", "not-found", "failed"),  # the host's answer: counts
     ("/bad-request.jpg", "http-error", "failed"),
     ("/html.jpg", "not-an-image", "rejected"),  # the host delivered; the bytes are the upload's problem
     ("/empty.jpg", "not-an-image", "rejected"),
     ("/huge.jpg", "too-large", "rejected")],
)
def test_http_permanent_failures_are_terminal(engine: sa.Engine, image_host: str, path: str, error: str,
                                              outcome: str) -> None:
    cid = add_card(engine, image_host + path)
    with make_fetcher(engine, [], [image_host.split("//", 1)[1]]) as fetcher:
        report = run_stage_c(engine, [cid], writer="w", run_id=None, fetcher=fetcher, lexicon=frozenset())
    assert (report.terminal, report.fetch_failures, report.rejected) == (1, outcome == "failed", outcome == "rejected")
    assert evidence(engine, cid)[0].fetch_error_class == error and outcomes(engine) == [(outcome, cid)]


def test_transient_failures_have_a_bounded_retry_budget(engine: sa.Engine, image_host: str) -> None:
    cid = add_card(engine, f"{image_host}/broken.jpg")
    with make_fetcher(engine, [], [image_host.split("//", 1)[1]]) as fetcher:
        reports = [run_stage_c(engine, None, writer="w", run_id=None, fetcher=fetcher, lexicon=frozenset(),
                               retry_budget=3) for _ in range(4)]
    assert [(r.attempted, r.terminal) for r in reports] == [(1, 0), (1, 0), (1, 1), (0, 0)]
    [row] = evidence(engine, cid)
    assert row.terminal and row.fetch_error_class == "server-error"
    assert [o for o, _ in outcomes(engine)] == ["failed"] * 3


def make_eligible_now(engine: sa.Engine, card_id: int) -> None:
    """As if the card's backoff had passed."""
    with engine.begin() as conn:
        conn.execute(sa.update(Card).where(Card.id == card_id).values(next_eligible_at=utcnow() - timedelta(seconds=1)))


def requeue_for(engine: sa.Engine, fetcher) -> int:
    """What the dispatch sensor (and ``stage-e bulk``) does with the settings it runs under."""
    with session_scope(engine) as session:
        return requeue_config_refused(session, fetcher.settings_fingerprint)


def test_a_host_refused_by_the_settings_waits_on_configuration_and_is_fetched_once_the_setting_changes(
        engine: sa.Engine, image_host: str, caplog: pytest.LogCaptureFixture) -> None:
    cid = add_card(engine, f"{image_host}/card.jpg")
    with make_fetcher(engine, [], ["images.example.org"]) as fetcher, caplog.at_level(logging.WARNING):
        report = run_stage_c(engine, [cid], writer="w", run_id=None, fetcher=fetcher, lexicon=frozenset())
    assert (report.config_refused, report.terminal, report.fetch_failures, report.completed) == (1, 0, 0, 0)
    assert report.deferred_card_ids == [cid]
    assert evidence(engine, cid) == [] and outcomes(engine) == []  # nothing fetched, nothing terminal
    c = card(engine, cid)
    # Out of the backlog (idleness and sizing do not count it), on no timer, counted on its own.
    assert c.stage_c_pending is False and c.next_eligible_at is None
    with Session(engine) as session:
        assert waiting_on_configuration(session, REFUSING_SETTINGS) == {"STAGE_E_FETCH_ALLOWED_HOSTS": 1}
    assert not has_unclaimed(engine, STAGE_C_PENDING, now=utcnow() + timedelta(days=1))
    assert "STAGE_E_FETCH_ALLOWED_HOSTS" in caplog.text and image_host.split("//", 1)[1] in caplog.text

    with make_fetcher(engine, [], ["images.example.org"]) as same:  # the same settings: tried never again
        assert requeue_for(engine, same) == 0
        again = run_stage_c(engine, None, writer="w", run_id=None, fetcher=same, lexicon=frozenset())
        assert again.attempted == 0 and outcomes(engine) == []
    with make_fetcher(engine, [], ["images.example.org", image_host.split("//", 1)[1]]) as fixed:
        assert requeue_for(engine, fixed) == 1 and requeue_for(engine, fixed) == 0
        later = run_stage_c(engine, None, writer="w", run_id=None, fetcher=fixed, lexicon=frozenset())
    assert (later.attempted, later.completed, later.terminal) == (1, 1, 0)
    c = card(engine, cid)
    assert c.stage_c_pending is False and (c.throttle_count, c.next_eligible_at) == (0, None)
    with Session(engine) as session:
        assert waiting_on_configuration(session, REFUSING_SETTINGS) == {}
    [row] = evidence(engine, cid)
    assert row.fetch_ok is True and not row.terminal and outcomes(engine) == [("ok", cid)]


def test_a_file_outside_the_image_roots_waits_for_the_setting(engine: sa.Engine, root: Path, tmp_path: Path,
                                                              caplog: pytest.LogCaptureFixture) -> None:
    cid = add_card(engine, (root / "good.jpg").as_uri())
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    with make_fetcher(engine, [elsewhere]) as fetcher, caplog.at_level(logging.WARNING):
        report = run_stage_c(engine, None, writer="w", run_id=None, fetcher=fetcher, lexicon=frozenset())
    assert (report.attempted, report.config_refused, report.terminal) == (1, 1, 0)
    assert evidence(engine, cid) == [] and outcomes(engine) == [] and card(engine, cid).stage_c_pending is False
    with Session(engine) as session:
        assert waiting_on_configuration(session, REFUSING_SETTINGS) == {"STAGE_E_IMAGE_ROOTS": 1}
    assert "STAGE_E_IMAGE_ROOTS" in caplog.text
    with make_fetcher(engine, [elsewhere, root]) as fixed:
        assert requeue_for(engine, fixed) == 1
        later = run_stage_c(engine, None, writer="w", run_id=None, fetcher=fixed, lexicon=frozenset())
    assert (later.completed, later.terminal) == (1, 0) and card(engine, cid).stage_c_pending is False


def test_a_redirect_off_the_allow_list_is_the_uploads_terminal_outcome_fetched_once(
        engine: sa.Engine, image_host: str) -> None:
    cid = add_card(engine, f"{image_host}/escape.jpg")
    with make_fetcher(engine, [], [image_host.split("//", 1)[1]]) as fetcher:
        first = run_stage_c(engine, None, writer="w", run_id=None, fetcher=fetcher, lexicon=frozenset())
        second = run_stage_c(engine, None, writer="w", run_id=None, fetcher=fetcher, lexicon=frozenset())
    assert (first.attempted, first.terminal, first.rejected, first.config_refused) == (1, 1, 1, 0)
    assert second.attempted == 0
    [row] = evidence(engine, cid)
    assert row.terminal and row.fetch_error_class == "redirect-not-allowed"
    assert outcomes(engine) == [("rejected", cid)] and card(engine, cid).stage_c_pending is False


@pytest.mark.parametrize("how", ["dot-dot", "symlink"])
def test_a_path_escaping_its_image_root_is_the_uploads_terminal_outcome_fetched_once(
        engine: sa.Engine, root: Path, tmp_path: Path, how: str) -> None:
    secret = tmp_path / "secret.jpg"
    secret.write_bytes((root / "good.jpg").read_bytes())
    if how == "symlink":
        (root / "link.jpg").symlink_to(secret)
        locator = (root / "link.jpg").as_uri()
    else:
        locator = "file://" + str(root) + "/../secret.jpg"
    cid = add_card(engine, locator)
    with make_fetcher(engine, [root]) as fetcher:
        first = run_stage_c(engine, None, writer="w", run_id=None, fetcher=fetcher, lexicon=frozenset())
        second = run_stage_c(engine, None, writer="w", run_id=None, fetcher=fetcher, lexicon=frozenset())
    assert (first.attempted, first.terminal, first.config_refused) == (1, 1, 0) and second.attempted == 0
    [row] = evidence(engine, cid)
    assert row.terminal and row.fetch_error_class == "escapes-image-roots"


def throttle_wait(engine: sa.Engine, fetcher, card_id: int) -> float:
    """One pass over the card (throttled): the seconds until it is eligible again; then as if they had passed."""
    before = utcnow()
    run_stage_c(engine, [card_id], writer="w", run_id=None, fetcher=fetcher, lexicon=frozenset())
    wait = (card(engine, card_id).next_eligible_at - before).total_seconds()
    make_eligible_now(engine, card_id)
    return wait


def test_throttles_in_a_row_back_off_exponentially_jittered_and_a_success_resets_them(
        engine: sa.Engine, image_host: str) -> None:
    host = image_host.split("//", 1)[1]
    cid = add_card(engine, f"{image_host}/unavailable.jpg")
    with make_fetcher(engine, [], [host]) as fetcher:
        waits = [throttle_wait(engine, fetcher, cid) for _ in range(3)]
        assert card(engine, cid).throttle_count == 3
        # The host answered nobody in between: each delay doubles, jittered within its upper half.
        for wait, full in zip(waits, (THROTTLE_BASE_S, 2 * THROTTLE_BASE_S, 4 * THROTTLE_BASE_S)):
            assert full / 2 - 0.5 <= wait <= full + 0.5
        with engine.begin() as conn:  # the host is fine again (same card, a working locator)
            conn.execute(sa.update(Card).where(Card.id == cid).values(image_locator=f"{image_host}/card.jpg"))
        report = run_stage_c(engine, [cid], writer="w", run_id=None, fetcher=fetcher, lexicon=frozenset())
    assert report.completed == 1
    c = card(engine, cid)
    assert (c.throttle_count, c.next_eligible_at, c.stage_c_pending) == (0, None, False)


def test_a_cards_throttle_delay_starts_over_while_the_host_answers_others(engine: sa.Engine, image_host: str) -> None:
    """A throttle says the host is busy, not that the card is bad: under a host that throttles some
    requests and serves others, no card's wait grows with its own streak."""
    host = image_host.split("//", 1)[1]
    unlucky = add_card(engine, f"{image_host}/unavailable.jpg", name="Unlucky")
    others = [add_card(engine, f"{image_host}/card.jpg?{i}", name=f"Other {i}") for i in range(6)]
    waits = []
    with make_fetcher(engine, [], [host]) as fetcher:
        for other in others:
            waits.append(throttle_wait(engine, fetcher, unlucky))
            assert run_stage_c(engine, [other], writer="w", run_id=None, fetcher=fetcher,
                               lexicon=frozenset()).completed == 1
    assert card(engine, unlucky).throttle_count == 1
    assert max(waits) <= THROTTLE_BASE_S + 0.5, waits


def test_a_cards_throttle_delay_is_bounded_and_jittered(engine: sa.Engine, image_host: str) -> None:
    host = image_host.split("//", 1)[1]
    cids = [add_card(engine, f"{image_host}/unavailable.jpg?{i}", name=f"Card {i}") for i in range(9)]
    with make_fetcher(engine, [], [host]) as fetcher:
        firsts = [throttle_wait(engine, fetcher, cid) for cid in cids[1:]]
        streak = [throttle_wait(engine, fetcher, cids[0]) for _ in range(10)]
    assert max(streak) <= THROTTLE_CAP_S + 0.5, streak
    assert streak[-1] >= THROTTLE_CAP_S / 2 - 0.5
    assert max(firsts) - min(firsts) > 0.1, firsts  # cards throttled together do not come back in lockstep


@pytest.mark.parametrize(("path", "at_least_s"), [("/busy.jpg", 3), ("/busy-long.jpg", 120), ("/busy-date.jpg", 280)])
def test_a_longer_retry_after_is_honoured(engine: sa.Engine, image_host: str, path: str, at_least_s: int) -> None:
    cid = add_card(engine, image_host + path)
    before = utcnow()
    with make_fetcher(engine, [], [image_host.split("//", 1)[1]]) as fetcher:
        run_stage_c(engine, [cid], writer="w", run_id=None, fetcher=fetcher, lexicon=frozenset())
        wait = (card(engine, cid).next_eligible_at - before).total_seconds()
        assert at_least_s <= wait <= at_least_s + 25
        # Until then no pass fetches it, whether it names the card or walks the backlog.
        named = run_stage_c(engine, [cid], writer="w", run_id=None, fetcher=fetcher, lexicon=frozenset())
        walked = run_stage_c(engine, None, writer="w", run_id=None, fetcher=fetcher, lexicon=frozenset())
    assert (named.attempted, named.not_yet_eligible, named.deferred_card_ids) == (0, 1, [cid])
    assert (walked.attempted, walked.not_yet_eligible) == (0, 1)
    assert outcomes(engine) == [("throttled", cid)]


def requeue_stale(engine: sa.Engine) -> int:
    """What the dispatch sensor does after a deploy: one step of the manifest rollout."""
    with session_scope(engine) as session:
        return rollout_step(session, now=utcnow()).requeued


def test_stale_extractor_is_recomputed_alone(engine: sa.Engine, root: Path) -> None:
    cid = add_card(engine, (root / "good.jpg").as_uri())
    with make_fetcher(engine, [root]) as fetcher:
        run_stage_c(engine, [cid], writer="w1", run_id=None, fetcher=fetcher, lexicon=frozenset())
        [row] = evidence(engine, cid)
        real_phash = row.symbol_phash
        # As if the manifest had moved symbol_region past the stored version: the stored value is
        # stale; a sentinel in a current field shows that field is carried forward, not recomputed.
        versions = dict(row.extractor_versions, symbol_region="symbol-region-v0")
        with engine.begin() as conn:
            conn.execute(sa.update(ImageEvidence).where(ImageEvidence.id == row.id).values(
                extractor_versions=versions, symbol_phash=1, collector_number="sentinel"))
        assert requeue_stale(engine) == 1
        assert requeue_stale(engine) == 0
        report = run_stage_c(engine, None, writer="w2", run_id=None, fetcher=fetcher, lexicon=frozenset())
    assert report.completed == 1
    [row] = evidence(engine, cid)
    assert row.symbol_phash == real_phash and row.collector_number == "sentinel"
    assert row.extractor_versions == dict(MANIFEST_VERSIONS) and row.writer == "w2"


def test_failed_refetch_for_a_stale_key_keeps_the_stored_values(engine: sa.Engine, root: Path,
                                                                card_jpeg: bytes) -> None:
    (root / "gone.jpg").write_bytes(card_jpeg)
    cid = add_card(engine, (root / "gone.jpg").as_uri())
    with make_fetcher(engine, [root]) as fetcher:
        run_stage_c(engine, [cid], writer="w", run_id=None, fetcher=fetcher, lexicon=frozenset())
        [row] = evidence(engine, cid)
        with engine.begin() as conn:
            conn.execute(sa.update(ImageEvidence).where(ImageEvidence.id == row.id).values(
                extractor_versions=dict(row.extractor_versions, art_phash="art-phash-v0")))
        requeue_stale(engine)
        (root / "gone.jpg").unlink()
        report = run_stage_c(engine, None, writer="w", run_id=None, fetcher=fetcher, lexicon=frozenset())
    assert report.terminal == 1
    [after] = evidence(engine, cid)
    assert after.terminal and after.skip_reasons.get("art_phash") == "not-found"
    assert after.collector_number == row.collector_number and after.width == row.width and after.fetch_ok is True
    assert after.extractor_versions == dict(MANIFEST_VERSIONS)


def test_limit_progress_and_stop(engine: sa.Engine, root: Path) -> None:
    ids = [add_card(engine, (root / f"nope{i}.jpg").as_uri()) for i in range(5)]
    ticks: list[int] = []
    with make_fetcher(engine, [root]) as fetcher:
        limited = run_stage_c(engine, None, writer="w", run_id=None, fetcher=fetcher, lexicon=frozenset(), limit=2,
                              progress=ticks.append)
        assert limited.attempted == 2 and ticks == [1, 1]
        # The stop signal turns true after one more card: that card is done, the rest are deferred.
        stopped = run_stage_c(engine, ids, writer="w", run_id=None, fetcher=fetcher, lexicon=frozenset(),
                              should_stop=lambda: len(ticks) >= 3, progress=ticks.append)
    assert (stopped.attempted, stopped.skipped_current) == (1, 1)
    assert stopped.deferred_card_ids == ids[1:]
