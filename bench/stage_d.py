"""Stage D cost per card, DB writes included, on SQLite and PostgreSQL, against baselines from the same run.

Builds a catalogue and cards with stored evidence directly (Stage D never reads images), then times:
  * BULK: ``run_stage_d(engine, None)`` over every card;
  * micro-batches: ``run_stage_d(engine, ids)`` over 25-card scopes, as the dispatcher calls it;
  * baseline 1: one ORM ``session.add`` + commit per vote row (how the original wrote votes, ~27 ms/row);
  * baseline 2: one multi-row INSERT of the same vote rows (the floor for writing them at all).
Prints ms per card and the ratios. Usage: python bench/stage_d.py [--cards N] [--skip-postgres]
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
import uuid
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.orm import Session

from stage_e_dagster.catalog.engine import make_engine
from stage_e_dagster.catalog.migrate import upgrade
from stage_e_dagster.catalog.models import Card, Expansion, ImageEvidence, Printing, PrintingVote, ScanLog, StageDPass
from stage_e_dagster.stage_c.manifest import MANIFEST_VERSIONS
from stage_e_dagster.stage_d.name_index import invalidate_name_index
from stage_e_dagster.stage_d.names import normalize_name
from stage_e_dagster.stage_d.run import run_stage_d

PG_SERVER = "postgresql+psycopg2://postgres@127.0.0.1:5432/postgres"
BATCH = 25


def build(engine: sa.Engine, cards: int, seed: int = 0) -> list[int]:
    rng = random.Random(seed)
    sets = [f"s{i:02d}" for i in range(max(10, cards // 100))]
    names = [f"Bench Card {i}" for i in range(max(20, cards // 2))]
    with Session(engine) as s, s.begin():
        s.execute(sa.insert(Expansion), [{"code": c, "name": f"Set {c}"} for c in sets])
        exp = dict(s.execute(sa.select(Expansion.code, Expansion.id)).all())
        rows, taken = [], set()
        while len(rows) < cards:
            code, number, name = rng.choice(sets), str(rng.randint(1, 400)), rng.choice(names)
            if (code, number) in taken:
                continue
            taken.add((code, number))
            rows.append({"expansion_id": exp[code], "name": name, "normalized_name": normalize_name(name),
                         "collector_number": number, "lang": "en", "artist": "Ann Artist", "border_color": "black",
                         "frame": "2015", "layout": "normal", "art_phash": rng.getrandbits(63)})
        s.execute(sa.insert(Printing), rows)
        printings = s.execute(sa.select(Printing.id, Printing.name, Expansion.code, Printing.collector_number,
                                        Printing.art_phash).join(Expansion)).all()
        card_rows, evidence = [], []
        for i in range(cards):
            p = rng.choice(printings)
            kind = rng.random()
            ev = {"collector_set_code": p.code, "collector_number": p.collector_number,
                  "art_phash": p.art_phash ^ 0b101}
            if kind < 0.1:    # old frame: no collector line, the fallback places it by art
                ev.update(collector_set_code=None, collector_number=None)
            elif kind < 0.2:  # unreadable set code and foreign art: routed to review
                ev.update(collector_set_code="zzz", art_phash=rng.getrandbits(63))
            elif kind < 0.25:  # a real set without this name: a no-match vote
                ev.update(collector_set_code=sets[0] if p.code != sets[0] else sets[1], collector_number="999")
            chash = f"sha256:{uuid.uuid4().hex}"
            card_rows.append({"identifier": f"bench-{i}", "name": p.name, "image_locator": "file:///x",
                              "content_hash": chash, "stage_c_pending": False, "stage_d_pending": True})
            evidence.append((chash, ev))
        s.execute(sa.insert(Card), card_rows)
        ids = dict(s.execute(sa.select(Card.content_hash, Card.id)).all())
        s.execute(sa.insert(ImageEvidence), [
            {"card_id": ids[h], "content_hash": h, "extractor_versions": dict(MANIFEST_VERSIONS), "skip_reasons": {},
             "writer": "bench", "fetch_ok": True, "terminal": False, "is_truncated": False, "layout_class": "black",
             "collector_language": None, "artist_name": None, "copyright_year": None, **ev}
            for h, ev in evidence
        ])
    return sorted(ids.values())


def reset_votes(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        for table in (PrintingVote, ScanLog, StageDPass):
            conn.execute(sa.delete(table))
        conn.execute(sa.update(Card).values(stage_d_pending=True, printing_status="unresolved",
                                            inferred_printing_id=None))


def vote_rows(engine: sa.Engine) -> list[dict]:
    with engine.connect() as conn:
        return [dict(r._mapping) for r in conn.execute(sa.select(
            PrintingVote.card_id, PrintingVote.printing_id, PrintingVote.is_no_match, PrintingVote.agent_id,
            PrintingVote.source, PrintingVote.confidence, PrintingVote.run_id))]


def bench(label: str, engine: sa.Engine, cards: int) -> None:
    invalidate_name_index()
    ids = build(engine, cards)
    run_stage_d(engine, ids[:1], run_id="warm")  # builds and caches the name index, as a long-lived worker has
    reset_votes(engine)

    t = time.perf_counter()
    report = run_stage_d(engine, None, run_id="bench-bulk")
    bulk_ms = (time.perf_counter() - t) * 1000 / cards
    rows = vote_rows(engine)
    reset_votes(engine)

    t = time.perf_counter()
    for start in range(0, len(ids), BATCH):
        run_stage_d(engine, ids[start:start + BATCH], run_id=f"bench-mb-{start}")
    micro_ms = (time.perf_counter() - t) * 1000 / cards

    with engine.begin() as conn:
        conn.execute(sa.delete(PrintingVote))
    t = time.perf_counter()
    for row in rows:
        with Session(engine) as s, s.begin():
            s.add(PrintingVote(**row))
    orm_ms = (time.perf_counter() - t) * 1000 / max(1, len(rows))

    with engine.begin() as conn:
        conn.execute(sa.delete(PrintingVote))
    t = time.perf_counter()
    with engine.begin() as conn:
        conn.execute(sa.insert(PrintingVote), rows)
    insert_ms = (time.perf_counter() - t) * 1000 / max(1, len(rows))

    print(f"[{label}] {cards} cards: {report.join_key_votes} join-key votes, {report.fallback_votes} fallback votes, "
          f"{report.slow_path_routed} routed, {report.abstentions} scan-log rows")
    print(f"[{label}] Stage D BULK            {bulk_ms:8.3f} ms/card   (target <= 3 ms/card)")
    print(f"[{label}] Stage D 25-card batches {micro_ms:8.3f} ms/card")
    print(f"[{label}] baseline: per-row ORM vote write  {orm_ms:8.3f} ms/row  (the original measured ~27 ms/row)")
    print(f"[{label}] baseline: one multi-row INSERT   {insert_ms:8.3f} ms/row")
    print(f"[{label}] ratio Stage D BULK ms/card : per-row ORM ms/row = {bulk_ms / orm_ms:6.2f}; "
          f"25-card batches : per-row ORM = {micro_ms / orm_ms:6.2f}; BULK : bare INSERT = {bulk_ms / insert_ms:6.1f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cards", type=int, default=2000)
    parser.add_argument("--skip-postgres", action="store_true")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        engine = make_engine(f"sqlite:///{Path(tmp) / 'bench.sqlite'}")
        upgrade(engine)
        bench("sqlite", engine, args.cards)
        engine.dispose()

    if not args.skip_postgres:
        name = f"stage_e_bench_{uuid.uuid4().hex[:8]}"
        server = sa.create_engine(PG_SERVER, isolation_level="AUTOCOMMIT")
        with server.connect() as conn:
            conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
        try:
            url = sa.make_url(PG_SERVER).set(database=name).render_as_string(hide_password=False)
            engine = make_engine(url)
            upgrade(engine)
            bench("postgres", engine, args.cards)
            engine.dispose()
        finally:
            with server.connect() as conn:
                conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
            server.dispose()
    return 0


if __name__ == "__main__":
    sys.exit(main())
