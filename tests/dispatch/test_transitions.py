"""The lifecycle table in docs/architecture.md against the code: every name it gives exists, every batch
status is in it, and each compare-and-set moves a batch only from the states its row lists.

The table is the one place a reader learns which transition may move a batch from which state; a
transition that accepts another state (or a row that names a renamed test) would go unseen.
"""

from __future__ import annotations

import ast
import importlib
import re
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Callable

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

from stage_e_dagster.catalog.base import utcnow
from stage_e_dagster.catalog.engine import session_scope
from stage_e_dagster.catalog.models import BATCH_STATUSES, CardClaim, MicroBatch
from stage_e_dagster.defs.retention import forget_batches
from stage_e_dagster.dispatch import batches
from stage_e_dagster.dispatch.batches import (
    abandon,
    fail_and_retry,
    forget_request,
    mark_succeeded,
    record_batch,
    record_stage_c_end,
    renew_lease,
    request_again,
    split_tail,
    still_held,
    take_batch,
)
from tests.factories import insert_cards

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "stage_e_dagster"
SECTION = "## A micro-batch's lifecycle"
TTL = 600


@dataclass(frozen=True)
class Row:
    sources: frozenset[str]  # the states the row moves a batch from ("(none)": the row creates it)
    targets: frozenset[str]  # the states it moves it to; empty: the row deletes it
    functions: tuple[str, ...]
    text: str


def _statuses(cell: str) -> frozenset[str]:
    return frozenset(s for s in re.findall(r"`([a-z_]+)`", cell) if s in BATCH_STATUSES)


def section_text() -> str:
    doc = (ROOT / "docs" / "architecture.md").read_text()
    start = doc.index(SECTION)
    end = doc.find("\n## ", start + len(SECTION))
    return doc[start:end if end != -1 else None]


def table() -> list[Row]:
    rows = []
    for line in section_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if not line.startswith("|") or len(cells) != 5 or cells[0] in ("from", "---"):
            continue
        source, target, function, _, _ = cells
        rows.append(Row(sources=_statuses(source), targets=_statuses(target),
                        functions=tuple(re.findall(r"`([\w/.:]+)`", function)), text=line))
    return rows


def by_function() -> dict[str, Row]:
    return {name.rsplit("::", 1)[-1]: row for row in table() for name in row.functions}


def _defines(path: Path, name: str) -> bool:
    tree = ast.parse(path.read_text())
    return any(isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name
               for node in ast.walk(tree))


def test_every_function_and_test_the_lifecycle_section_names_exists() -> None:
    rows = table()
    assert len(rows) >= 10, "the lifecycle table was not found or not parsed"
    missing = []
    tests = set(re.findall(r"`(tests/[\w/]+\.py)::(\w+)`", section_text()))
    assert len(tests) >= 10, "the table names the tests that hold it"
    for row in rows:
        for name in row.functions:
            module, _, function = name.rpartition("::") if "::" in name else ("dispatch/batches.py", "", name)
            dotted = "stage_e_dagster." + module.removesuffix(".py").replace("/", ".")
            if not callable(getattr(importlib.import_module(dotted), function, None)):
                missing.append(f"{module}::{function}")
    for path, name in set(re.findall(r"`((?:tests|stage_e_dagster|dispatch|defs)/[\w/]+\.py)::(\w+)`", section_text())):
        file = ROOT / path if path.startswith("tests/") else PACKAGE / path
        if not (file.is_file() and _defines(file, name)):
            missing.append(f"{path}::{name}")
    assert missing == []


def test_every_batch_status_is_in_the_lifecycle_table() -> None:
    named = frozenset().union(*(row.sources | row.targets for row in table()))
    assert set(BATCH_STATUSES) - named == set()


def test_the_check_sees_a_test_that_does_not_exist() -> None:
    assert _defines(Path(__file__), "test_every_batch_status_is_in_the_lifecycle_table")
    assert not _defines(Path(__file__), "test_that_was_renamed")


# A call of a transition on the batch ``key`` as read (``seen``), by the run that took it ("run-1")
# or by another ("run-2"). Several calls per function: the ways its callers call it.
Call = Callable[[Session, MicroBatch], object]


def _fail(run_id: str | None) -> Call:
    return lambda s, seen: fail_and_retry(s, seen, reason="boom", now=utcnow(), max_attempts=3, claim_ttl_s=TTL,
                                          run_id=run_id)


def _abandon(run_id: str | None) -> Call:
    return lambda s, seen: abandon(s, seen.batch_key, reason="cancelled", now=utcnow(), run_id=run_id)


HOLDER, STRANGER = "run-1", "run-2"
LATER = timedelta(seconds=TTL)
CALLS: dict[str, dict[str, Call]] = {
    "take_batch": {
        "a run": lambda s, seen: take_batch(s, seen.batch_key, run_id=STRANGER, now=utcnow(),
                                            lease_until=utcnow() + LATER),
    },
    "request_again": {"a tick": lambda s, seen: request_again(s, seen, now=utcnow(), claim_ttl_s=TTL)},
    "forget_request": {"a run end": lambda s, seen: forget_request(s, seen.batch_key, made_before=utcnow())},
    "renew_lease": {"a tick": lambda s, seen: renew_lease(s, seen.batch_key, until=utcnow() + LATER)},
    "still_held": {"its run": lambda s, seen: still_held(s, seen.batch_key, run_id=HOLDER, now=utcnow())},
    "record_stage_c_end": {
        "its run": lambda s, seen: record_stage_c_end(s, seen.batch_key, run_id=HOLDER, cards_done=1,
                                                      stopped_by_trip=None),
    },
    "mark_succeeded": {
        "its run": lambda s, seen: mark_succeeded(s, seen, now=utcnow(), peak_rss_mb=1.0, run_id=HOLDER),
    },
    "split_tail": {
        "its run": lambda s, seen: split_tail(s, seen.batch_key, run_id=HOLDER, tail=seen.card_ids[-1:], now=utcnow(),
                                              claim_ttl_s=TTL),
    },
    "fail_and_retry": {"its run's end": _fail(HOLDER), "an untaken run's end": _fail(None)},
    "abandon": {"its run's end": _abandon(HOLDER), "an untaken run's end": _abandon(None)},
    "forget_batches": {"retention": lambda s, seen: forget_batches(s, [seen.batch_key])},
}
# Calls by a run that does not hold the batch: they may move no batch, whatever its state.
STRANGERS: dict[str, Call] = {
    "still_held": lambda s, seen: still_held(s, seen.batch_key, run_id=STRANGER, now=utcnow()),
    "record_stage_c_end": lambda s, seen: record_stage_c_end(s, seen.batch_key, run_id=STRANGER, cards_done=1,
                                                             stopped_by_trip=None),
    "mark_succeeded": lambda s, seen: mark_succeeded(s, seen, now=utcnow(), peak_rss_mb=1.0, run_id=STRANGER),
    "split_tail": lambda s, seen: split_tail(s, seen.batch_key, run_id=STRANGER, tail=seen.card_ids[-1:], now=utcnow(),
                                             claim_ttl_s=TTL),
    "fail_and_retry": _fail(STRANGER),
    "abandon": _abandon(STRANGER),
}


def test_every_transition_of_the_table_is_driven_here() -> None:
    cas = {name for name in by_function() if name != "record_batch"}
    assert cas == set(CALLS), "a transition in the table has no calls below, or a call no row"
    assert set(STRANGERS) <= set(CALLS)


def batch_in(engine: sa.Engine, status: str, tag: str) -> str:
    """A batch of two claimed cards in ``status``, held by run-1 as far as its state says, its lease
    and its request old enough for any transition that waits on them."""
    now = utcnow()
    ids = insert_cards(engine, 2, prefix=tag)
    with session_scope(engine) as session:
        made = record_batch(session, ids, trigger_reason="card-created", now=now, claim_ttl_s=TTL, key=tag)
        assert made is not None
        finished = status not in batches.IN_FLIGHT
        session.execute(
            sa.update(MicroBatch).where(MicroBatch.batch_key == tag).values(
                status=status,
                run_id=HOLDER if status != "pending" else None,
                started_at=now - timedelta(minutes=5) if status != "pending" else None,
                requested_at=now - timedelta(hours=1),
                lease_expires_at=now - timedelta(seconds=1),
                finished_at=now - timedelta(minutes=1) if finished else None,
            )
        )
        if finished:
            session.execute(sa.delete(CardClaim).where(CardClaim.batch_key == tag))
    return tag


def snapshot(engine: sa.Engine) -> tuple[list[tuple], list[tuple]]:
    with engine.connect() as conn:
        rows = [tuple(r) for r in conn.execute(sa.select(MicroBatch.__table__).order_by(MicroBatch.batch_key))]
        claims = [tuple(r) for r in conn.execute(sa.select(CardClaim.__table__).order_by(CardClaim.card_id))]
    return rows, claims


def moved(engine: sa.Engine, key: str, call: Call) -> tuple[bool, str | None]:
    """Call it on the batch as read; whether the catalogue changed, and the batch's status after (None:
    deleted). A call that changes nothing must leave every row and claim as it was."""
    before = snapshot(engine)
    with session_scope(engine) as session:
        call(session, session.get(MicroBatch, key))
    after = snapshot(engine)
    with session_scope(engine) as session:
        batch = session.get(MicroBatch, key)
        return before != after, batch.status if batch is not None else None


@pytest.mark.parametrize("function", sorted(CALLS))
def test_each_transition_moves_a_batch_only_from_the_states_its_row_lists(engine: sa.Engine, function: str) -> None:
    row = by_function()[function]
    allowed = {status for status in BATCH_STATUSES
               if any(moved(engine, batch_in(engine, status, f"mb-{status}-{i}"), call)[0]
                      for i, call in enumerate(CALLS[function].values()))}
    assert allowed == set(row.sources), f"{function} moves a batch from {sorted(allowed)}; the table: {row.text}"
    for status in sorted(row.sources):
        for i, call in enumerate(CALLS[function].values()):
            key = batch_in(engine, status, f"mb-to-{status}-{i}")
            changed, after = moved(engine, key, call)
            if changed and after != status:  # a move to another state goes where the row says
                assert after in row.targets or (after is None and not row.targets), (function, status, after)
    for status in BATCH_STATUSES:
        if function in STRANGERS:
            key = batch_in(engine, status, f"mb-stranger-{status}")
            assert moved(engine, key, STRANGERS[function]) == (False, status), (function, status)
