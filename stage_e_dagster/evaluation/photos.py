"""Evaluate Stage C and Stage D on a folder of card photos labelled by a CSV, in a scratch catalogue.

The folder holds the images and ``labels.csv`` with one row per photo: ``file``, ``set``,
``collector_number``, ``lang``, ``name`` (optionally ``artist``, ``border_color``,
``printed_collector_text``, ``released``, ``frame``, ``orientation``). The catalogue is built from
the labels, in a new SQLite file: each labelled printing once, plus decoys beside it wherever that
slot is free, so a careless vote has somewhere wrong to go. A card that prints a number gets its The
List reprint, the same name under the same number in another set and a neighbour in the same set. A
name the project knows the real printings of (``known_printings.csv``) gets them all: the same name
in other sets, with other borders and years, which an old frame's vote must tell apart. The real
Stage C then Stage D run on the photos, and each photo's readings, its join-key outcome and its
votes, with the readings each vote rests on, are compared with its label.

Several photos may show one printing; a photo of several cards has one row per card (its
``orientation`` starts with ``MULTI``) and is one upload, scored as an abstention with its reason:
any vote on it is wrong; a digital render is flagged (``RENDER``) and read like a photo.
"""

from __future__ import annotations

import re
import tempfile
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from ..catalog.collector_line import normalize_collector_number
from ..catalog.engine import make_engine
from ..catalog.evidence_facts import present_evidence
from ..catalog.migrate import upgrade
from ..catalog.models import Card, Expansion, Printing, PrintingVote, ScanLog
from ..stage_d.agents import FALLBACK_AGENT, JOIN_KEY_AGENT
from ..stage_d.names import normalize_name
from .known_printings import KnownPrinting, load_known_printings
from .labels import LabelFileError, read_csv_rows

LABELS_FILE = "labels.csv"
REQUIRED_COLUMNS = ("file", "set", "collector_number", "lang", "name")
DECOY_SET = "ema"      # the same name under the same number in another set
LIST_SET = "plst"      # The List, where Scryfall files reprints as "AVR-68"
# A printed "number/total": the total is the set's printed size, which a reading can be checked against.
_PRINTED_TOTAL = re.compile(r"\b\d{1,4}[a-z]?\s*/\s*(\d{1,4})\b")


@dataclass(frozen=True)
class PhotoLabel:
    file: str
    set_code: str
    number: str
    lang: str
    name: str
    printed_name: str | None = None
    artist: str | None = None
    border: str | None = None
    printed_text: str = ""
    released: date | None = None
    frame: str | None = None
    orientation: str = ""

    @property
    def multi(self) -> bool:
        """One card of a photo of several."""
        return self.orientation.upper().startswith("MULTI")

    @property
    def render(self) -> bool:
        return self.orientation.upper().startswith("RENDER")

    @property
    def prints_number(self) -> bool:
        """The photo shows a legible collector number: not an old frame that prints none, nor a line
        the labeller could not read ("(none printed) ...", "(mostly illegible ...)")."""
        return bool(self.number) and not self.printed_text.strip().startswith("(")

    @property
    def prints_set_code(self) -> bool:
        return self.prints_number and self.set_code.upper() in self.printed_text.upper()

    @property
    def printed_total(self) -> int | None:
        match = _PRINTED_TOTAL.search(self.printed_text)
        return int(match.group(1)) if match else None


@dataclass
class PhotoResult:
    label: PhotoLabel
    read_set: str | None = None
    read_number: str | None = None
    outcome: str | None = None          # the join key's scan-log reason, or "vote"
    fallback: str | None = None         # the fallback's scan-log reason, when it looked
    still_fit: list[str] = field(default_factory=list)  # "set/number" the fallback found fitting when it abstained
    votes: list[str] = field(default_factory=list)   # "set/number" or "no-match", per machine vote
    readings: list[str] = field(default_factory=list)  # what each vote rests on, in the order of ``votes``
    wrong_votes: int = 0

    @property
    def number_right(self) -> bool:
        return self.read_number is not None and (
            normalize_collector_number(self.read_number) == normalize_collector_number(self.label.number))

    @property
    def set_right(self) -> bool:
        return (self.read_set or "") == self.label.set_code


def load_photo_labels(path: Path) -> list[PhotoLabel]:
    """Rows of a labels CSV; a missing file, column or value is a :class:`LabelFileError`."""
    rows = read_csv_rows(path, REQUIRED_COLUMNS)
    labels = []
    for line, row in enumerate(rows, start=2):
        empty = [c for c in ("file", "set", "name") if not (row.get(c) or "").strip()]
        if empty:
            raise LabelFileError(f"{path}:{line}: empty {', '.join(empty)}")
        released = (row.get("released") or "").strip()
        labels.append(PhotoLabel(
            file=row["file"].strip(), set_code=row["set"].strip().lower(),
            number=(row.get("collector_number") or "").strip(), lang=(row.get("lang") or "en").strip().lower(),
            name=row["name"].strip(), printed_name=(row.get("printed_name") or "").strip() or None,
            artist=(row.get("artist") or "").strip() or None,
            border=(row.get("border_color") or "").strip() or None,
            printed_text=row.get("printed_collector_text") or "",
            released=date.fromisoformat(released) if released else None,
            frame=(row.get("frame") or "").strip() or None,
            orientation=(row.get("orientation") or "").strip(),
        ))
    return labels


def _inferred_frame(label: PhotoLabel) -> str:
    """Scryfall's frame from the printed line: none printed is an old frame; a number over a total
    with a set code is the 2015 frame; a bare number over a total (no set code) the 2003 one."""
    if label.frame:
        return label.frame
    text = label.printed_text
    if not text or text.startswith("(none"):
        return "1993"
    return "2015" if label.set_code.upper() in text else "2003"


def build_photo_catalogue(engine: sa.Engine, labels: list[PhotoLabel],
                          known: dict[str, list[KnownPrinting]] | None = None) -> dict[tuple[str, str], int]:
    """Each labelled printing once, then decoys in the slots no label holds; returns (set, number) of
    every labelled printing -> its id. ``known`` (default: the project's known printings) gives the
    real printings of a name and the release dates of the sets the labels do not date."""
    known = load_known_printings() if known is None else known
    released = {kp.set_code: kp.released for kps in known.values() for kp in kps if kp.released}
    with Session(engine) as session, session.begin():
        sets: dict[str, Expansion] = {}
        slots: dict[tuple[str, str, str], Printing] = {}

        def expansion(code: str, day: date | None = None, printed_size: int | None = None) -> Expansion:
            exp = sets.get(code)
            if exp is None:
                exp = sets[code] = Expansion(code=code, name=f"Set {code}", released_at=day or released.get(code))
                session.add(exp)
            if printed_size is not None:
                exp.printed_size = printed_size
            return exp

        def printing(name: str, exp: Expansion, number: str, lang: str = "en", **facts: Any) -> Printing | None:
            """A printing in a free slot; None when the slot is taken (a labelled printing wins it)."""
            slot = (exp.code, normalize_collector_number(number) or number, lang)
            if slot in slots:
                return None
            p = slots[slot] = Printing(expansion=exp, name=name, normalized_name=normalize_name(name),
                                       collector_number=number, lang=lang, layout="normal", **facts)
            session.add(p)
            return p

        expansion(DECOY_SET, date(2016, 6, 10))
        expansion(LIST_SET, date(2020, 9, 25))
        truth: dict[tuple[str, str], Printing] = {}
        for lb in labels:
            exp = expansion(lb.set_code, lb.released, lb.printed_total)
            slot = (lb.set_code, normalize_collector_number(lb.number) or lb.number, lb.lang)
            made = printing(lb.name, exp, lb.number, lb.lang, artist=lb.artist, border_color=lb.border,
                            frame=_inferred_frame(lb), released_at=lb.released or released.get(lb.set_code),
                            printed_name=lb.printed_name if lb.printed_name != lb.name else None)
            truth[(lb.set_code, lb.number)] = made if made is not None else slots[slot]
        for lb in labels:
            frame = _inferred_frame(lb)
            real = known.get(normalize_name(lb.name), [])
            for i, kp in enumerate(real):
                if kp.set_code == lb.set_code:
                    continue  # the labelled printing itself
                # Reprints reuse the art and its credit: the harder decoy.
                printing(lb.name, expansion(kp.set_code, kp.released), kp.number or f"x{i}", lb.lang,
                         artist=lb.artist, border_color=kp.border, frame=kp.frame, released_at=kp.released)
            if frame != "1993":
                printing(lb.name, sets[LIST_SET], f"{lb.set_code.upper()}-{lb.number}", lb.lang, artist=lb.artist,
                         border_color="black", frame="2015")
                printing(lb.name, sets[DECOY_SET], lb.number, lb.lang, artist=lb.artist, border_color="black",
                         frame="2015")
            if lb.number.isdigit():
                printing(f"Neighbour of {lb.name}", sets[lb.set_code], str(int(lb.number) + 1), frame=frame,
                         released_at=lb.released)
        session.flush()
        return {key: p.id for key, p in truth.items()}


def evaluate_photo_folder(folder: Path, labels_path: Path | None = None, *, workdir: Path | None = None,
                          set_symbols: Path | None = None) -> list[PhotoResult]:
    """Run Stage C and Stage D on every photo ``labels_path`` (default ``FOLDER/labels.csv``) labels."""
    folder = Path(folder).resolve()
    return evaluate_photos(folder, load_photo_labels(labels_path or folder / LABELS_FILE), workdir=workdir,
                           set_symbols=set_symbols)


def evaluate_photos(folder: Path, labels: list[PhotoLabel], *, workdir: Path | None = None,
                    set_symbols: Path | None = None) -> list[PhotoResult]:
    """Run Stage C and Stage D on every labelled photo in ``folder``; one result per label, in label order.

    ``set_symbols``: a folder of ``<set code>.svg`` icons standing in for the ones ``stage-e catalog
    fetch-symbols`` stores; without it the catalogue knows no set's symbol."""
    # The stages (OCR, image decoding) and the icon renderer load only when an evaluation runs.
    from ..catalog_import.set_symbols import store_symbol_folder
    from ..stage_c.fetch import ImageFetcher
    from ..stage_c.run import run_stage_c
    from ..stage_d.run import run_stage_d

    folder = Path(folder).resolve()
    absent = sorted({lb.file for lb in labels if not (folder / lb.file).is_file()})
    if absent:
        raise LabelFileError(f"labelled photo(s) not in {folder}: {', '.join(absent)}")
    if set_symbols is not None and not any(Path(set_symbols).glob("*.svg")):
        raise LabelFileError(f"no set symbols (<set code>.svg) in {set_symbols}")
    # One upload per file: the first row of a photo of several cards names it, as an uploader would.
    uploads: dict[str, PhotoLabel] = {}
    for lb in labels:
        uploads.setdefault(lb.file, lb)
    with tempfile.TemporaryDirectory(dir=workdir) as scratch:
        engine = make_engine(f"sqlite:///{Path(scratch) / 'photos.sqlite'}")
        try:
            upgrade(engine)
            truth = build_photo_catalogue(engine, labels)
            if set_symbols is not None:
                store_symbol_folder(engine, Path(set_symbols))
            with engine.begin() as conn:
                ids = {file: int(conn.execute(sa.insert(Card).values(
                    identifier=file, name=lb.name, image_locator=(folder / file).as_uri(),
                ).returning(Card.id)).scalar_one()) for file, lb in uploads.items()}
            with ImageFetcher(engine=engine, image_roots=[folder], allowed_hosts=[], timeout_s=10.0,
                              max_bytes=50_000_000, rate_per_sec=1000.0) as fetcher:
                run_stage_c(engine, sorted(ids.values()), writer="evaluate:photos", run_id="evaluate-photos",
                            fetcher=fetcher)
            run_stage_d(engine, sorted(ids.values()), run_id="evaluate-photos")
            return _results(engine, labels, ids, truth)
        finally:
            engine.dispose()


def _results(engine: sa.Engine, labels: list[PhotoLabel], ids: dict[str, int],
             truth: dict[tuple[str, str], int]) -> list[PhotoResult]:
    with Session(engine) as session:
        evidence = present_evidence(session, ids.values())
        where = {pid: (code, number) for pid, code, number in session.execute(
            sa.select(Printing.id, Expansion.code, Printing.collector_number)
            .join(Expansion, Expansion.id == Printing.expansion_id))}
        votes = session.execute(sa.select(PrintingVote.card_id, PrintingVote.printing_id, PrintingVote.is_no_match,
                                          PrintingVote.detail)
                                .where(PrintingVote.source == "ocr")).all()
        outcomes = dict(session.execute(
            sa.select(ScanLog.card_id, ScanLog.reason).where(ScanLog.agent_id == JOIN_KEY_AGENT)
            .order_by(ScanLog.id)).all())
        fallback = {cid: (reason, detail) for cid, reason, detail in session.execute(
            sa.select(ScanLog.card_id, ScanLog.reason, ScanLog.detail).where(ScanLog.agent_id == FALLBACK_AGENT)
            .order_by(ScanLog.id))}
    results = []
    for lb in labels:
        cid = ids[lb.file]
        ev = evidence.get(cid)
        reason, detail = fallback.get(cid, (None, None))
        result = PhotoResult(lb, read_set=ev.collector_set_code if ev else None,
                             read_number=ev.collector_number if ev else None,
                             outcome=outcomes.get(cid), fallback=reason,
                             still_fit=list((detail or {}).get("fitting_printings", [])))
        for vcid, pid, no_match, detail in votes:
            if vcid != cid:
                continue
            result.votes.append("no-match" if no_match else "/".join(where[pid]))
            result.readings.append(vote_readings(detail or {}))
            # On a photo of several cards no vote is right: it would be for whichever card was read.
            result.wrong_votes += bool(lb.multi or no_match or pid != truth[(lb.set_code, lb.number)])
        if result.votes and result.outcome is None:
            result.outcome = "vote"
        results.append(result)
    return results


def vote_readings(detail: dict[str, Any]) -> str:
    """What a vote rests on, from its detail: the fallback names its readings; a join-key vote rests on
    the number and what confirmed it."""
    if "readings" in detail:
        return "+".join(detail["readings"])
    parts = ["number"] if detail.get("number") else []
    parts += [detail["confirmed_by"]] if detail.get("confirmed_by") else []
    parts += ["title"] if detail.get("title_agrees") is not None else []
    return "+".join(parts) or "-"


def photo_totals(results: list[PhotoResult]) -> dict[str, int]:
    """Figures over the labelled cards: readings on single-card uploads (photos and renders) that print
    a legible number, votes everywhere (a photo of several cards counted once), and what became of the
    old frames that print no number and of the photos of several cards."""
    single = [r for r in results if not r.label.multi]
    numbered = [r for r in single if r.label.prints_number]
    photos = [r for r in numbered if not r.label.render]
    with_set = [r for r in numbered if r.label.prints_set_code]
    old = [r for r in single if _inferred_frame(r.label) == "1993"]
    multi_files = {r.label.file for r in results if r.label.multi}
    first_rows = list({r.label.file: r for r in reversed(results)}.values())
    return {
        "photos": len({r.label.file for r in results}),
        "labelled_cards": len(results),
        "single_card_uploads": len(single),
        "collector_number_right": sum(r.number_right for r in numbered),
        "collector_number_printed": len(numbered),
        "collector_number_right_on_photos": sum(r.number_right for r in photos),
        "collector_number_printed_on_photos": len(photos),
        "set_code_right": sum(r.set_right for r in with_set),
        "set_code_printed": len(with_set),
        "votes": sum(len(r.votes) for r in first_rows),
        "wrong_votes": sum(r.wrong_votes for r in first_rows),
        "cards_voted": sum(bool(r.votes) for r in single),
        "numbered_cards_voted_right": sum(bool(r.votes) and not r.wrong_votes for r in numbered),
        "old_frames": len(old),
        "old_frames_voted_right": sum(bool(r.votes) and not r.wrong_votes for r in old),
        "old_frames_abstained": sum(not r.votes for r in old),
        "multi_card_photos": len(multi_files),
        "multi_card_photos_abstained": len({r.label.file for r in results if r.label.multi and not r.votes}),
    }
