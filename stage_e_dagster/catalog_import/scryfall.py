"""Import Scryfall's bulk card data into the canonical catalogue, as a stream.

Which records become printings: every card object except the layouts that are not identification
targets for uploaded card images -- ``token``, ``double_faced_token``, ``emblem`` and
``art_series`` (tokens are their own card type upstream, and art-series cards carry no game
text). Everything else is kept, digital-only cards included: their names (``A-Cosmos Elixir``)
differ from the paper card's, so they never widen a paper card's candidates. Multi-face cards are
one printing named ``"Front // Back"``; Stage D's name index also files them under each face.

Records are read one at a time with ijson, never the whole file, and written in batches, each its
own transaction. Printings are upserted on the Scryfall id, so importing the same file twice adds
nothing; a printing already in the catalogue under the same set, collector number and language
without a Scryfall id is adopted. Art hashes come from optional local images named
``<scryfall id>.{jpg,jpeg,png,webp}``, hashed exactly as Stage C hashes an upload.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any, BinaryIO, Callable, Iterator

import ijson
import sqlalchemy as sa
from PIL import Image, UnidentifiedImageError
from sqlalchemy.orm import Session

from ..catalog.models import Expansion, Printing
from ..stage_c.hashing import art_phash, phash_int
from ..stage_d.name_index import invalidate_name_index
from ..stage_d.names import normalize_name

log = logging.getLogger(__name__)

NOT_IDENTIFICATION_TARGETS = frozenset({"token", "double_faced_token", "emblem", "art_series"})
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".webp")
BATCH_SIZE = 500


class ScryfallImportError(ValueError):
    """The file is not Scryfall card JSON (or breaks off); batches before the fault stay imported."""


@dataclass
class ImportReport:
    records_read: int = 0
    printings_inserted: int = 0
    printings_updated: int = 0
    expansions_inserted: int = 0
    art_hashed: int = 0
    images_missing: int = 0
    images_unreadable: int = 0
    skipped: Counter[str] = field(default_factory=Counter)

    def as_dict(self) -> dict[str, Any]:
        return {
            "records_read": self.records_read, "printings_inserted": self.printings_inserted,
            "printings_updated": self.printings_updated, "expansions_inserted": self.expansions_inserted,
            "art_hashed": self.art_hashed, "images_missing": self.images_missing,
            "images_unreadable": self.images_unreadable, "skipped": dict(sorted(self.skipped.items())),
        }


def import_scryfall(
    engine: sa.Engine,
    cards_path: Path,
    *,
    sets_path: Path | None = None,
    images_dir: Path | None = None,
    batch_size: int = BATCH_SIZE,
    progress: Callable[[int], None] | None = None,
) -> ImportReport:
    """Upsert expansions (from ``sets_path`` and the cards) and printings from a Scryfall bulk file."""
    report = ImportReport()
    try:
        if sets_path is not None:
            with open(sets_path, "rb") as fh:
                sets = [_set_row(obj) for obj in _stream(fh) if isinstance(obj, dict) and obj.get("code")]
            with Session(engine) as session, session.begin():
                report.expansions_inserted += _upsert_expansions(session, sets)
        with open(cards_path, "rb") as fh:
            batch: list[dict[str, Any]] = []
            for obj in _stream(fh):
                report.records_read += 1
                row = _printing_row(obj, report.skipped)
                if row is not None:
                    batch.append(row)
                if len(batch) >= batch_size:
                    _write_batch(engine, batch, images_dir, report)
                    batch = []
                    if progress is not None:
                        progress(report.records_read)
            if batch:
                _write_batch(engine, batch, images_dir, report)
    except (ijson.JSONError, ijson.IncompleteJSONError) as exc:
        raise ScryfallImportError(
            f"not valid Scryfall JSON after {report.records_read} records: {exc}"
        ) from exc
    finally:
        invalidate_name_index()
    if progress is not None:
        progress(report.records_read)
    return report


def _stream(fh: BinaryIO) -> Iterator[Any]:
    """Objects of a top-level JSON array (bulk files) or of a list object's ``data`` (API pages)."""
    head = fh.read(512).lstrip()
    fh.seek(0)
    prefix = "item" if head.startswith(b"[") else "data.item"
    if not head.startswith((b"[", b"{")):
        raise ScryfallImportError("the file does not start with a JSON array or object")
    yield from ijson.items(fh, prefix, use_float=True)


def _date(value: Any) -> date | None:
    try:
        return date.fromisoformat(value) if value else None
    except (TypeError, ValueError):
        return None


def _set_row(obj: dict[str, Any]) -> dict[str, Any]:
    return {"code": str(obj["code"]).lower(), "name": str(obj.get("name") or obj["code"])[:200],
            "released_at": _date(obj.get("released_at")), "scryfall_id": obj.get("id")}


def _printing_row(obj: Any, skipped: Counter[str]) -> dict[str, Any] | None:
    if not isinstance(obj, dict) or obj.get("object", "card") != "card":
        skipped["not-a-card"] += 1
        return None
    if not all(obj.get(key) for key in ("id", "set", "collector_number", "name")):
        skipped["missing-fields"] += 1
        return None
    layout = obj.get("layout")
    if layout in NOT_IDENTIFICATION_TARGETS:
        skipped[f"layout-{layout}"] += 1
        return None
    faces = obj.get("card_faces") or []
    artist = obj.get("artist") or next((f.get("artist") for f in faces if f.get("artist")), None)
    name = str(obj["name"])
    return {
        "scryfall_id": str(obj["id"]),
        "set": {"code": str(obj["set"]).lower(), "name": str(obj.get("set_name") or obj["set"])[:200],
                "scryfall_id": obj.get("set_id"), "released_at": _date(obj.get("released_at"))},
        "name": name[:300],
        "normalized_name": normalize_name(name)[:300],
        "collector_number": str(obj["collector_number"])[:16],
        "lang": str(obj.get("lang") or "en")[:8],
        "artist": artist[:200] if artist else None,
        "border_color": obj.get("border_color"),
        "frame": obj.get("frame"),
        "layout": layout,
        "released_at": _date(obj.get("released_at")),
    }


def _upsert_expansions(session: Session, sets: list[dict[str, Any]]) -> int:
    """Insert unknown set codes; fill a known set's missing Scryfall id and release date. Returns inserts."""
    wanted = {s["code"]: s for s in sets}
    if not wanted:
        return 0
    existing = {
        e.code: e for e in session.execute(sa.select(Expansion).where(Expansion.code.in_(list(wanted)))).scalars()
    }
    taken_ids = set(session.execute(
        sa.select(Expansion.scryfall_id).where(
            Expansion.scryfall_id.in_([s["scryfall_id"] for s in sets if s["scryfall_id"]]))
    ).scalars())
    inserted = 0
    for code, s in wanted.items():
        exp = existing.get(code)
        sid = s["scryfall_id"] if s["scryfall_id"] not in taken_ids else None
        if exp is None:
            session.add(Expansion(code=code, name=s["name"], released_at=s["released_at"], scryfall_id=sid))
            inserted += 1
            if sid:
                taken_ids.add(sid)
        else:
            if exp.scryfall_id is None and sid:
                exp.scryfall_id = sid
                taken_ids.add(sid)
            if exp.released_at is None and s["released_at"] is not None:
                exp.released_at = s["released_at"]
    session.flush()
    return inserted


def _write_batch(engine: sa.Engine, batch: list[dict[str, Any]], images_dir: Path | None,
                 report: ImportReport) -> None:
    rows = {row["scryfall_id"]: row for row in batch}  # a record repeated in the file: the last one wins
    with Session(engine) as session, session.begin():
        set_rows: dict[str, dict[str, Any]] = {}
        for row in rows.values():
            s = row["set"]
            known = set_rows.get(s["code"])
            earlier = s["released_at"] and (known is None or known["released_at"] is None
                                             or s["released_at"] < known["released_at"])
            if known is None or earlier:
                set_rows[s["code"]] = dict(s)
        report.expansions_inserted += _upsert_expansions(session, list(set_rows.values()))
        exp_ids = dict(session.execute(
            sa.select(Expansion.code, Expansion.id).where(Expansion.code.in_(list(set_rows)))
        ).all())

        by_sid = dict(session.execute(
            sa.select(Printing.scryfall_id, Printing.id).where(Printing.scryfall_id.in_(list(rows)))
        ).all())
        keys = [(exp_ids[r["set"]["code"]], r["collector_number"], r["lang"]) for r in rows.values()]
        by_key = {
            (e, n, lang): (pid, sid) for pid, e, n, lang, sid in session.execute(
                sa.select(Printing.id, Printing.expansion_id, Printing.collector_number, Printing.lang,
                          Printing.scryfall_id)
                .where(sa.tuple_(Printing.expansion_id, Printing.collector_number, Printing.lang).in_(keys))
            )
        }
        inserts, updates = [], []
        for sid, row in rows.items():
            key = (exp_ids[row["set"]["code"]], row["collector_number"], row["lang"])
            values = {k: row[k] for k in ("name", "normalized_name", "collector_number", "lang", "artist",
                                          "border_color", "frame", "layout", "released_at")}
            values.update(expansion_id=key[0], scryfall_id=sid)
            values.update(_hashes(images_dir, sid, report))
            if sid in by_sid:
                updates.append({"pk": by_sid[sid], **values})
            elif key in by_key:
                other_pid, other_sid = by_key[key]
                if other_sid is not None:
                    report.skipped["duplicate-collector-number"] += 1
                    continue
                updates.append({"pk": other_pid, **values})
                by_key[key] = (other_pid, sid)
            else:
                inserts.append(values)
                by_key[key] = (-1, sid)
        if inserts:
            # Only rows that gained hashes carry hash keys; insert them separately so every row has the same keys.
            for group in _same_keys(inserts):
                session.execute(sa.insert(Printing), group)
        for group in _same_keys(updates):
            table = Printing.__table__
            cols = {k: sa.bindparam(f"v_{k}") for k in group[0] if k != "pk"}
            session.connection().execute(
                sa.update(table).where(table.c.id == sa.bindparam("pk")).values(**cols),
                [{"pk": u["pk"], **{f"v_{k}": v for k, v in u.items() if k != "pk"}} for u in group],
            )
        report.printings_inserted += len(inserts)
        report.printings_updated += len(updates)


def _same_keys(rows: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    groups: dict[tuple[str, ...], list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault(tuple(sorted(row)), []).append(row)
    return list(groups.values())


def _hashes(images_dir: Path | None, scryfall_id: str, report: ImportReport) -> dict[str, int]:
    """Whole-card and art hashes from a local image; nothing (existing hashes kept) when there is none."""
    if images_dir is None:
        return {}
    path = next((images_dir / f"{scryfall_id}{suffix}" for suffix in IMAGE_SUFFIXES
                 if (images_dir / f"{scryfall_id}{suffix}").is_file()), None)
    if path is None:
        report.images_missing += 1
        return {}
    try:
        with Image.open(path) as img:
            img.load()
            rgb = img.convert("RGB")
    except (OSError, UnidentifiedImageError, Image.DecompressionBombError) as exc:
        log.warning("cannot hash %s: %s", path, exc)
        report.images_unreadable += 1
        return {}
    report.art_hashed += 1
    return {"image_phash": phash_int(rgb), "art_phash": art_phash(rgb)}
