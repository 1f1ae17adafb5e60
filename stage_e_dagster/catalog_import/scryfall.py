"""Import Scryfall card data into the canonical catalogue, as a stream.

Accepted files: a JSON array of card objects (the bulk files), JSON Lines (one card object a
line), a single card object, or a list object (``{"object": "list", "data": [...]}``, an API
page), UTF-8 with or without a byte-order mark. Anything else -- not JSON, a set list, an object
that is not ``"object": "card"``, a file without one card -- is refused with one line saying what
was found; a file that breaks off stops the import there, keeping the batches before it.

Which records become printings: every card object except the layouts that are not identification
targets for uploaded card images -- ``token``, ``double_faced_token``, ``emblem`` and
``art_series`` (tokens are their own card type upstream, and art-series cards carry no game
text). Everything else is kept, digital-only cards included: their names (``A-Cosmos Elixir``)
differ from the paper card's, so they never widen a paper card's candidates. Multi-face cards are
one printing named ``"Front // Back"`` that also keeps its faces' names; every printing keeps the
name printed on it in its own language, so Stage D finds a French upload by its French name. A bad
record inside a good file (not a card, a missing or mistyped field) is skipped, counted by reason,
and the first few are described in the report.

Records are read one at a time with ijson, never the whole file, and written in batches, each its
own transaction. Printings are upserted on the Scryfall id, so importing the same file twice adds
nothing; a printing already in the catalogue under the same set, collector number and language
without a Scryfall id is adopted. Each printing keeps its art crop URL, which ``art_hashes`` fetches
to hash, and each set of the sets file its icon URI, which ``set_symbols`` fetches to render; offline,
art hashes come from optional local images named ``<scryfall id>.{jpg,jpeg,png,webp}``, hashed
exactly as Stage C hashes an upload.
"""

from __future__ import annotations

import logging
import os
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
SKIP_EXAMPLES = 5  # bad records described in the report; the rest are only counted
UTF8_BOM = b"\xef\xbb\xbf"
JSON_WHITESPACE = b" \t\r\n"
REQUIRED_TEXT = ("id", "set", "collector_number", "name")
PRINTING_COLUMNS = ("name", "normalized_name", "printed_name", "face_names", "printed_face_names",
                    "collector_number", "lang", "artist", "border_color", "frame", "layout", "released_at",
                    "art_crop_url")
OPTIONAL_TEXT = ("lang", "printed_name", "artist", "set_name", "border_color", "frame", "layout", "released_at")


class ScryfallImportError(ValueError):
    """The file is not Scryfall card JSON (or breaks off); batches before the fault stay imported."""


@dataclass
class ImportReport:
    shape: str = ""
    records_read: int = 0
    printings_inserted: int = 0
    printings_updated: int = 0
    expansions_inserted: int = 0
    art_hashed: int = 0
    images_missing: int = 0
    images_unreadable: int = 0
    skipped: Counter[str] = field(default_factory=Counter)
    skip_examples: list[str] = field(default_factory=list)
    found: Counter[str] = field(default_factory=Counter)  # what the records were: "card", "object 'set'", ...

    def skip(self, reason: str, example: str | None = None) -> None:
        """Count a skipped record; describe the first few bad ones so the user can find them."""
        self.skipped[reason] += 1
        if example is not None and len(self.skip_examples) < SKIP_EXAMPLES:
            self.skip_examples.append(f"record {self.records_read}: {example}")

    def as_dict(self) -> dict[str, Any]:
        return {
            "shape": self.shape, "records_read": self.records_read,
            "printings_inserted": self.printings_inserted, "printings_updated": self.printings_updated,
            "expansions_inserted": self.expansions_inserted, "art_hashed": self.art_hashed,
            "images_missing": self.images_missing, "images_unreadable": self.images_unreadable,
            "skipped": dict(sorted(self.skipped.items())), "skip_examples": list(self.skip_examples),
        }


def import_scryfall(
    engine: sa.Engine,
    cards_path: Path,
    *,
    sets_path: Path | None = None,
    images_dir: Path | None = None,
    batch_size: int = BATCH_SIZE,
    progress: Callable[[int, float], None] | None = None,
) -> ImportReport:
    """Upsert expansions (from ``sets_path`` and the cards) and printings from a Scryfall card file.

    ``progress`` gets the records read so far and the share of the file read (for a time-left estimate).

    Raises ScryfallImportError, naming the file, when a file is not card (or set) data, holds no
    importable card, or breaks off.
    """
    report = ImportReport()
    try:
        with open(cards_path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            # Look at the cards file first: a wrong file is refused before the sets are written.
            report.shape, records = _records(fh, cards_path)
            if sets_path is not None:
                _import_sets(engine, sets_path, report)
            batch: list[dict[str, Any]] = []
            try:
                for obj in _reading(records, cards_path, report):
                    row = _printing_row(obj, report)
                    if row is not None:
                        batch.append(row)
                    if len(batch) >= batch_size:
                        _write_batch(engine, batch, images_dir, report)
                        batch = []
                        if progress is not None:
                            progress(report.records_read, fh.tell() / size if size else 1.0)
            except ScryfallImportError:
                # Records read before a fault are whole: write them, so the error's count is what was imported.
                if batch:
                    _write_batch(engine, batch, images_dir, report)
                raise
            if batch:
                _write_batch(engine, batch, images_dir, report)
    finally:
        invalidate_name_index()
    if report.shape == "objects":
        report.shape = "JSON Lines" if report.records_read > 1 else "single object"
    _refuse_if_nothing_kept(cards_path, report)
    if progress is not None:
        progress(report.records_read, 1.0)
    return report


def _import_sets(engine: sa.Engine, sets_path: Path, report: ImportReport) -> None:
    sets, found = [], Counter[str]()
    with open(sets_path, "rb") as fh:
        _, records = _records(fh, sets_path)
        for obj in _records_of(records, sets_path):
            kind = _kind(obj)
            found[kind] += 1
            if kind == "object 'set'" and _text(obj.get("code")):
                sets.append(_set_row(obj))
    if not sets:
        raise ScryfallImportError(
            f"{sets_path}: no set records ({_describe(found)}); --sets takes Scryfall's /sets list")
    with Session(engine) as session, session.begin():
        report.expansions_inserted += _upsert_expansions(session, sets)


def _refuse_if_nothing_kept(path: Path, report: ImportReport) -> None:
    """A file that gave not one printing is an error, never a quiet success with 0 records."""
    if report.printings_inserted or report.printings_updated or report.skipped["duplicate-collector-number"]:
        return
    if not report.found["card"]:
        raise ScryfallImportError(f"{path}: not Scryfall card data: no card records ({_describe(report.found)})")
    skipped = ", ".join(f"{k} {v}" for k, v in sorted(report.skipped.items()))
    first = f"; first: {report.skip_examples[0]}" if report.skip_examples else ""
    raise ScryfallImportError(
        f"{path}: no importable card among {report.found['card']} card records (skipped: {skipped}){first}"
    )


def _records(fh: BinaryIO, path: Path) -> tuple[str, Iterator[Any]]:
    """The file's shape and a stream of its top-level records; refuses a file that is not JSON.

    ``array`` (bulk files), ``list object`` (API pages: the items of ``data``) or ``objects``: one
    or more top-level objects, which covers JSON Lines, blank lines and CRLF included, and a
    single object.
    """
    start = _payload_start(fh, path)
    fh.seek(start)
    first = fh.read(1)
    fh.seek(start)
    if first == b"[":
        return "array", ijson.items(fh, "item", use_float=True)
    if first != b"{":
        raise ScryfallImportError(
            f"{path}: not a JSON array or object: it starts with {_preview(fh, start)}; {_ACCEPTED}")
    is_list = _first_object_is_a_list(fh, path)
    fh.seek(start)
    if is_list:
        return "list object", ijson.items(fh, "data.item", use_float=True, multiple_values=True)
    return "objects", ijson.items(fh, "", use_float=True, multiple_values=True)


_ACCEPTED = "Scryfall card data is a JSON array, JSON Lines, one card object or a list object"


def _payload_start(fh: BinaryIO, path: Path) -> int:
    """Offset of the first JSON character, past a UTF-8 byte-order mark and leading whitespace."""
    head = fh.read(4)
    if not head:
        raise ScryfallImportError(f"{path}: the file is empty; {_ACCEPTED}")
    if head.startswith(b"\x1f\x8b"):
        raise ScryfallImportError(f"{path}: the file is gzip-compressed: decompress it first (gunzip)")
    if head.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise ScryfallImportError(f"{path}: the file is UTF-16 text: save it as UTF-8")
    offset = len(UTF8_BOM) if head.startswith(UTF8_BOM) else 0
    fh.seek(offset)
    while True:
        chunk = fh.read(65536)
        if not chunk:
            raise ScryfallImportError(f"{path}: the file holds only whitespace; {_ACCEPTED}")
        stripped = chunk.lstrip(JSON_WHITESPACE)
        if stripped:
            return offset + len(chunk) - len(stripped)
        offset += len(chunk)


def _preview(fh: BinaryIO, start: int) -> str:
    fh.seek(start)
    head = fh.read(80)
    line = head.splitlines()[0] if head else b""
    return repr(line.decode("utf-8", errors="replace")[:40])


def _first_object_is_a_list(fh: BinaryIO, path: Path) -> bool:
    """Whether the first top-level object has a ``data`` array (a list object) -- read no further than that."""
    try:
        events = ijson.parse(fh, multiple_values=True)
        for prefix, event, value in events:
            if prefix == "" and event == "map_key" and value == "data":
                return next(events)[1] == "start_array"
            if prefix == "" and event == "end_map":
                return False
    except (ijson.JSONError, ijson.IncompleteJSONError, StopIteration) as exc:
        raise ScryfallImportError(f"{path}: not valid Scryfall JSON in its first record: {_first_line(exc)}") from exc
    return False


def _records_of(records: Iterator[Any], path: Path) -> Iterator[Any]:
    """The records, with a parse error turned into one line that names the file."""
    count = 0
    try:
        for obj in records:
            count += 1
            yield obj
    except (ijson.JSONError, ijson.IncompleteJSONError) as exc:
        raise ScryfallImportError(f"{path}: not valid Scryfall JSON after {count} records: {_first_line(exc)}") from exc


def _reading(records: Iterator[Any], path: Path, report: ImportReport) -> Iterator[Any]:
    for obj in _records_of(records, path):
        report.records_read += 1
        report.found[_kind(obj)] += 1
        yield obj


def _first_line(exc: Exception) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def _kind(obj: Any) -> str:
    """What a record is, in words for a message: ``card``, ``object 'set'``, ``an array``, ..."""
    if isinstance(obj, dict):
        kind = obj.get("object")
        if kind == "card":
            return "card"
        if isinstance(kind, str):
            return f"object {kind!r}"
        keys = ", ".join(sorted(map(str, obj))[:4]) or "none"
        return f"object without \"object\" (keys: {keys})"
    return {list: "an array", str: "a string", bool: "a boolean", type(None): "null"}.get(type(obj), "a number")


def _describe(found: Counter[str]) -> str:
    if not found:
        return "found no records"
    parts = [f"{n} x {kind}" for kind, n in found.most_common(3)]
    more = len(found) - 3
    return "found " + ", ".join(parts) + (f" and {more} other kinds" if more > 0 else "")


def _date(value: Any) -> date | None:
    try:
        return date.fromisoformat(value) if value else None
    except (TypeError, ValueError):
        return None


def _set_row(obj: dict[str, Any]) -> dict[str, Any]:
    return {"code": str(obj["code"]).lower(), "name": str(obj.get("name") or obj["code"])[:200],
            "released_at": _date(obj.get("released_at")), "scryfall_id": obj.get("id"),
            "card_count": obj["card_count"] if isinstance(obj.get("card_count"), int) else None,
            "printed_size": obj["printed_size"] if isinstance(obj.get("printed_size"), int) else None,
            "symbol_svg_uri": _icon_uri(obj.get("icon_svg_uri"))}


def _icon_uri(value: Any) -> str | None:
    """The set's ``icon_svg_uri``, which ``set_symbols`` fetches to render the set symbol."""
    if isinstance(value, str) and value.startswith(("https://", "http://")) and len(value) <= 500:
        return value
    return None


def _printing_row(obj: Any, report: ImportReport) -> dict[str, Any] | None:
    """The printing a card record becomes, or None (counted in the report) when it is skipped."""
    kind = _kind(obj)
    if kind != "card":
        report.skip("not-a-card", kind)
        return None
    ident = f"id {obj['id']}" if isinstance(obj.get("id"), str) else "no id"
    missing = [key for key in REQUIRED_TEXT if obj.get(key) in (None, "")]
    if missing:
        report.skip("missing-fields", f"{ident}: missing {', '.join(missing)}")
        return None
    mistyped = [key for key in REQUIRED_TEXT if not isinstance(obj[key], (str, int)) or isinstance(obj[key], bool)]
    mistyped += [key for key in OPTIONAL_TEXT if obj.get(key) is not None and not isinstance(obj[key], str)]
    faces = obj.get("card_faces") or []
    if not isinstance(faces, list) or not all(isinstance(f, dict) for f in faces):
        mistyped.append("card_faces")
        faces = []
    if mistyped:
        report.skip("bad-fields", f"{ident}: {', '.join(mistyped)} not of Scryfall's type")
        return None
    layout = obj.get("layout")
    if layout in NOT_IDENTIFICATION_TARGETS:
        report.skip(f"layout-{layout}")
        return None
    artist = obj.get("artist") or next((f["artist"] for f in faces if _text(f.get("artist"))), None)
    name = str(obj["name"])
    face_names = [f["name"] for f in faces if _text(f.get("name"))]
    printed_faces = [f["printed_name"] for f in faces if _text(f.get("printed_name"))]
    # Multi-face printings carry printed names on their faces only; join them as Scryfall joins ``name``.
    printed_name = obj.get("printed_name") or (" // ".join(printed_faces) if printed_faces else None)
    return {
        "scryfall_id": str(obj["id"]),
        "set": {"code": str(obj["set"]).lower(), "name": str(obj.get("set_name") or obj["set"])[:200],
                "scryfall_id": _text(obj.get("set_id")), "released_at": _date(obj.get("released_at"))},
        "name": name[:300],
        "normalized_name": normalize_name(name)[:300],
        "printed_name": printed_name[:300] if printed_name else None,
        "face_names": face_names or None,
        "printed_face_names": printed_faces or None,
        "collector_number": str(obj["collector_number"])[:16],
        "lang": str(obj.get("lang") or "en")[:8],
        "artist": artist[:200] if artist else None,
        "border_color": obj.get("border_color"),
        "frame": obj.get("frame"),
        "layout": layout,
        "released_at": _date(obj.get("released_at")),
        "art_crop_url": _art_crop_url(obj, faces),
    }


def _art_crop_url(obj: dict[str, Any], faces: list[dict[str, Any]]) -> str | None:
    """``image_uris.art_crop``; a multi-face card with images per face gives its front face's."""
    for uris in (obj.get("image_uris"), *(f.get("image_uris") for f in faces[:1])):
        url = uris.get("art_crop") if isinstance(uris, dict) else None
        if isinstance(url, str) and url.startswith(("https://", "http://")) and len(url) <= 500:
            return url
    return None


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _upsert_expansions(session: Session, sets: list[dict[str, Any]]) -> int:
    """Insert unknown set codes; fill a known set's missing Scryfall id and release date, and take the
    newest card count and icon URI. Returns inserts."""
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
            session.add(Expansion(code=code, name=s["name"], released_at=s["released_at"], scryfall_id=sid,
                                  card_count=s.get("card_count"), printed_size=s.get("printed_size"),
                                  symbol_svg_uri=s.get("symbol_svg_uri")))
            inserted += 1
            if sid:
                taken_ids.add(sid)
        else:
            if exp.scryfall_id is None and sid:
                exp.scryfall_id = sid
                taken_ids.add(sid)
            if exp.released_at is None and s["released_at"] is not None:
                exp.released_at = s["released_at"]
            if s.get("card_count") is not None:  # a set still being released grows: the newest count wins
                exp.card_count = s["card_count"]
            if s.get("printed_size") is not None:
                exp.printed_size = s["printed_size"]
            if s.get("symbol_svg_uri") is not None:  # a new icon version: set_symbols renders it again
                exp.symbol_svg_uri = s["symbol_svg_uri"]
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
            values = {k: row[k] for k in PRINTING_COLUMNS}
            values.update(expansion_id=key[0], scryfall_id=sid)
            values.update(_hashes(images_dir, sid, report))
            if sid in by_sid:
                updates.append({"pk": by_sid[sid], **values})
            elif key in by_key:
                other_pid, other_sid = by_key[key]
                if other_sid is not None:
                    report.skip("duplicate-collector-number")
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
    return {"image_phash": phash_int(rgb), "art_phash": art_phash(rgb), "art_phash_url": None}
