"""Fetching ahead in Stage C: the same results as fetching inline, fetches made on the fetch thread,
a stop that starts no card and wastes at most the bound, and a 403 met ahead that is never lost."""

from __future__ import annotations

import threading
from functools import partial
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

from stage_e_dagster.catalog.models import Card, FetchOutcome, ImageEvidence
from stage_e_dagster.stage_c.fetch import FetchLockout, FetchResult, ImageFetcher
from stage_e_dagster.stage_c.run import FETCH_AHEAD
from stage_e_dagster.stage_c.run import run_stage_c as _run_stage_c

from .conftest import make_fetcher

# What is under test here is the run around the reader (fetches, outcomes, stops, fetching ahead), not
# what the reader reads: its cheap pass (settings.ocr_pass, as in every test through settings) keeps
# each card short. The full pass is for the reader's own tests (test_text_reader.py, stage_d/test_corpus.py).
run_stage_c = partial(_run_stage_c, ocr_pass="cheap")


class Recording:
    """A fetcher that remembers each locator it was asked for and on which thread; ``after`` runs
    once a fetch has finished (answered or raised)."""

    def __init__(self, inner: ImageFetcher, after=None) -> None:  # type: ignore[no-untyped-def]
        self.inner = inner
        self.calls: list[tuple[str, str]] = []
        self.after = after
        self._lock = threading.Lock()

    @property
    def settings_fingerprint(self) -> str:
        return self.inner.settings_fingerprint

    def fetch(self, locator: str) -> FetchResult:
        with self._lock:
            self.calls.append((locator, threading.current_thread().name))
        try:
            return self.inner.fetch(locator)
        finally:
            if self.after is not None:
                self.after(locator)

    @property
    def locators(self) -> list[str]:
        return [locator for locator, _ in self.calls]


def add_cards(engine: sa.Engine, locators: list[str], *, tag: str) -> list[int]:
    with engine.begin() as conn:
        return [int(conn.execute(sa.insert(Card).values(identifier=f"{tag}-{i}", name="Card", image_locator=loc)
                                 .returning(Card.id)).scalar_one()) for i, loc in enumerate(locators)]


def outcomes(engine: sa.Engine) -> list[tuple[str, int | None]]:
    with Session(engine) as s:
        return [tuple(r) for r in s.execute(sa.select(FetchOutcome.outcome, FetchOutcome.card_id)
                                            .order_by(FetchOutcome.id))]


def evidence_by_card(engine: sa.Engine, ids: list[int]) -> list[tuple]:
    with Session(engine) as s:
        rows = {r.card_id: r for r in s.execute(sa.select(ImageEvidence).where(ImageEvidence.card_id.in_(ids)))
                .scalars()}
    return [None if i not in rows else (rows[i].terminal, rows[i].fetch_error_class, rows[i].collector_number,
                                        rows[i].art_phash, rows[i].extractor_versions) for i in ids]


def cards_state(engine: sa.Engine, ids: list[int]) -> list[tuple]:
    with Session(engine) as s:
        rows = {c.id: c for c in s.execute(sa.select(Card).where(Card.id.in_(ids))).scalars()}
    return [(rows[i].content_hash, rows[i].stage_c_pending, rows[i].stage_d_pending) for i in ids]


@pytest.fixture
def root(tmp_path: Path, card_jpeg: bytes) -> Path:
    root = tmp_path / "images"
    root.mkdir()
    for i in range(6):
        (root / f"good{i}.jpg").write_bytes(card_jpeg)
    (root / "trunc.jpg").write_bytes(card_jpeg[: len(card_jpeg) // 2])
    (root / "html.jpg").write_bytes(b"<html>error</html>")
    return root


def test_fetching_ahead_gives_the_same_results_as_fetching_inline(engine: sa.Engine, root: Path) -> None:
    names = ["good0.jpg", "trunc.jpg", "missing.jpg", "good1.jpg", "html.jpg", "good2.jpg"]
    locators = [(root / n).as_uri() for n in names]
    results = {}
    for depth in (0, FETCH_AHEAD):
        ids = add_cards(engine, locators, tag=f"d{depth}")
        with make_fetcher(engine, [root]) as inner:
            # The second card is done already (a terminal record): Stage C skips it, fetching nothing.
            run_stage_c(engine, ids[1:2], writer="w", run_id=None, fetcher=inner, lexicon=frozenset(),
                        fetch_ahead=depth)
            fetcher = Recording(inner)
            report = run_stage_c(engine, ids, writer="w", run_id=None, fetcher=fetcher, lexicon=frozenset(),
                                 fetch_ahead=depth)
        threads = {name for _, name in fetcher.calls}
        results[depth] = (report, evidence_by_card(engine, ids), cards_state(engine, ids),
                          [o for o, cid in outcomes(engine) if cid in ids], fetcher.locators, threads)
    inline, ahead = results[0], results[FETCH_AHEAD]
    assert ahead[:5] == inline[:5]
    assert (ahead[0].attempted, ahead[0].completed, ahead[0].skipped_current, ahead[0].terminal) == (6, 5, 1, 2)
    assert len(ahead[4]) == 5  # each card that needed its image was fetched exactly once
    assert inline[5] == {threading.main_thread().name} and all(t.startswith("stage-c-fetch") for t in ahead[5])


def test_a_stop_starts_no_further_card_and_wastes_at_most_the_bound(engine: sa.Engine, root: Path) -> None:
    ids = add_cards(engine, [(root / f"good{i}.jpg").as_uri() for i in range(6)], tag="s")
    done: list[int] = []
    with make_fetcher(engine, [root]) as inner:
        fetcher = Recording(inner)
        report = run_stage_c(engine, ids, writer="w", run_id=None, fetcher=fetcher, lexicon=frozenset(),
                             should_stop=lambda: len(done) >= 2, progress=done.append)
        calls_at_return = list(fetcher.calls)
    assert (report.attempted, report.completed) == (2, 2)
    assert report.deferred_card_ids == ids[2:]
    assert [e is not None for e in evidence_by_card(engine, ids)] == [True, True, False, False, False, False]
    assert [c[1] for c in cards_state(engine, ids)] == [False, False, True, True, True, True]
    # Fetches went to the stopped batch's first cards only, never more than the bound past the last card
    # started, and none was still going once Stage C returned.
    assert len(calls_at_return) <= 2 + FETCH_AHEAD
    first_cards = {(root / f"good{i}.jpg").as_uri() for i in range(2 + FETCH_AHEAD)}
    assert {locator for locator, _ in calls_at_return} <= first_cards
    assert fetcher.calls == calls_at_return
    assert [o for o, _ in outcomes(engine)] == ["ok", "ok"]


def test_a_lockout_mid_batch_stops_and_nothing_is_fetched_after_it(engine: sa.Engine, image_host: str) -> None:
    host = image_host.split("//", 1)[1]
    locators = [f"{image_host}/card.jpg?n=0", f"{image_host}/card.jpg?n=1", f"{image_host}/forbidden.jpg",
                f"{image_host}/card.jpg?n=3", f"{image_host}/card.jpg?n=4"]
    ids = add_cards(engine, locators, tag="l")
    with make_fetcher(engine, [], [host]) as inner:
        fetcher = Recording(inner)
        report = run_stage_c(engine, ids, writer="w", run_id="r", fetcher=fetcher, lexicon=frozenset())
    assert report.lockout is not None and report.lockout.card_id == ids[2] and report.lockout.status_code == 403
    assert (report.attempted, report.completed) == (3, 2)
    assert report.deferred_card_ids == ids[2:]
    assert outcomes(engine) == [("ok", ids[0]), ("ok", ids[1]), ("lockout", ids[2])]
    assert fetcher.locators == locators[:3]  # the host heard nothing from us after its 403
    assert [c[1] for c in cards_state(engine, ids)] == [False, False, True, True, True]


def test_a_403_met_ahead_of_a_stop_is_still_recorded(engine: sa.Engine, image_host: str) -> None:
    host = image_host.split("//", 1)[1]
    locators = [f"{image_host}/card.jpg?n=0", f"{image_host}/forbidden.jpg", f"{image_host}/card.jpg?n=2"]
    ids = add_cards(engine, locators, tag="a")
    refused = threading.Event()
    with make_fetcher(engine, [], [host]) as inner:
        fetcher = Recording(inner, after=lambda loc: refused.set() if "forbidden" in loc else None)
        asked = []

        def stop_after_first() -> bool:  # a trip opens while the first card computes; the 403 came back too
            asked.append(1)
            return len(asked) > 1 and refused.wait(5)

        report = run_stage_c(engine, ids, writer="w", run_id="r", fetcher=fetcher, lexicon=frozenset(),
                             should_stop=stop_after_first)
    assert report.attempted == 1 and report.completed == 1
    assert report.lockout is not None and report.lockout.card_id == ids[1]
    assert report.deferred_card_ids == ids[1:]
    assert outcomes(engine) == [("ok", ids[0]), ("lockout", ids[1])]


def test_a_403_met_ahead_for_a_card_that_needed_no_fetch_stops_stage_c(engine: sa.Engine, root: Path,
                                                                       image_host: str) -> None:
    host = image_host.split("//", 1)[1]
    [first, done, after] = add_cards(engine, [(root / f"good{i}.jpg").as_uri() for i in range(3)], tag="c")
    refused = threading.Event()
    with make_fetcher(engine, [root], [host]) as inner:
        run_stage_c(engine, [done], writer="w", run_id=None, fetcher=inner, lexicon=frozenset())
        # A writer moves the card to a new locator and declares the image's hash, which has current
        # evidence: Stage C settles it without a fetch, but its fetch ahead was made and the host refused it.
        with engine.begin() as conn:
            known = conn.execute(sa.select(Card.content_hash).where(Card.id == done)).scalar_one()
            conn.execute(sa.update(Card).where(Card.id == done).values(
                image_locator=f"{image_host}/forbidden.jpg", declared_content_hash=known))
        fetcher = Recording(inner, after=lambda loc: refused.set() if "forbidden" in loc else None)
        asked = []

        def go_on() -> bool:  # before the second card, its fetch ahead has come back
            asked.append(1)
            return len(asked) > 1 and not refused.wait(5)

        report = run_stage_c(engine, [first, done, after], writer="w", run_id="r", fetcher=fetcher,
                             lexicon=frozenset(), should_stop=go_on)
    assert (report.attempted, report.completed, report.skipped_current) == (2, 1, 1)
    assert report.lockout is not None and report.lockout.card_id == done
    assert report.deferred_card_ids == [after]
    assert outcomes(engine)[-2:] == [("ok", first), ("lockout", done)]


def test_a_fetch_ahead_exception_is_raised_for_its_own_card(engine: sa.Engine, root: Path) -> None:
    ids = add_cards(engine, [(root / "good0.jpg").as_uri(), (root / "good1.jpg").as_uri()], tag="x")

    class Lockout:
        settings_fingerprint = "any"

        def __init__(self) -> None:
            self.calls = 0

        def fetch(self, locator: str) -> FetchResult:
            self.calls += 1
            raise FetchLockout("images.example.org", 403, locator)

    fetcher = Lockout()
    report = run_stage_c(engine, ids, writer="w", run_id="r", fetcher=fetcher, lexicon=frozenset())  # type: ignore[arg-type]
    assert report.lockout is not None and report.lockout.card_id == ids[0]
    assert report.lockout.host == "images.example.org"
    assert report.deferred_card_ids == ids and fetcher.calls == 1
