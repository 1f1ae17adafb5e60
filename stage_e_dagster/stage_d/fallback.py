"""The fallback calculator, for cards the join key could not place: what the frame prints, then the art.

Candidates are the printings of the card's name. What the card prints narrows them first:
- the legal line's year: a card whose line reads "(c) 1995" was printed in 1995 (or released early
  in 1996), so a year before 1998, when numbers began, rules out every printing of other years and
  every later reprint; the early credit "Illus. (c)Name" dates a card to 1993-1994 the same way;
- the border colour, read confidently on the card, the set symbol at the type line's right end (when
  one set wins among the sets the name was printed in) and the artist credit (a reading that fits no
  candidate is treated as an OCR miss, not as a veto).
When a printed date or the symbol leaves one printing standing, the card is placed by its readings;
an art hash, when the card and that printing have one, confirms or blocks it. When several still
fit, the art hash must single one out, near enough and by a clear margin over the next; without one
the calculator abstains and names the printings that fit (Alpha and Beta print the same face).
Either way the vote must not contradict the printings the collector line reads as, and a title read
with confidence as another name blocks it. It never votes no-match.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from ..catalog.collector_line import (
    EARLY_CREDIT,
    EARLY_CREDIT_LAST_YEAR,
    FIRST_NUMBERED_YEAR,
    normalize_collector_number,
)
from ..catalog.evidence_facts import hamming
from . import agents as A
from .decision import (
    ARTIST_MATCH_RATIO,
    Decision,
    abstain,
    artist_ratio,
    at_collector_line,
    border_known,
    confident_border,
    read_set_code,
    title_agreement,
    unusable_evidence,
    vote,
)
from .facts import PrintingFacts
from .readings import year_is_marked
from .symbols import symbol_winner

ART_MAX_DISTANCE = 10      # of 64 bits: re-encoded, rescaled uploads of the same art stay well inside
ART_MARGIN = 8             # the runner-up must be at least this much further away
CONFIDENCE_SEVERAL_READINGS = 0.8
CONFIDENCE_ART_ONLY = 0.7
CONFIDENCE_PRINTED_READINGS = 0.75   # placed by a printed date (and border, symbol) with no art hash to confirm
OLD_FRAMES = frozenset({"1993", "1997"})
# A printing's release may fall in the year after the one its legal line gives (printed in December).
PRINTED_YEAR_SLACK = 1
# Sets that reprint a card as it was first printed, with a small stamp: its legal line keeps the first
# printing's year (Scryfall files The List as "plst", before 2023 as "plist").
REPRINTS_AS_FIRST_PRINTED = frozenset({"plst", "plist"})
NAMED_FITS = 8             # printings named in an abstention's detail


def printed_in(year: int, printing: PrintingFacts) -> bool:
    """Whether ``printing`` could carry a legal line of ``year``: released that year or the next
    (an unknown release date never rules a printing out)."""
    if printing.released_at is None:
        return True
    return year <= printing.released_at.year <= year + PRINTED_YEAR_SLACK


def released_by(year: int, printing: PrintingFacts) -> bool:
    """Whether ``printing`` was released in ``year`` or before (an unknown release date fits)."""
    return printing.released_at is None or printing.released_at.year <= year


@dataclass(frozen=True)
class PrintedFit:
    """The candidates that fit what the card prints, the readings that narrowed them, and whether a
    printed date (the legal line's year, the early credit) or the set symbol was among them."""

    printings: list[PrintingFacts]
    readings: list[str]
    anchored: bool   # a printed date or the set symbol chose among them


def _dated_fit(evidence: Any, candidates: list[PrintingFacts]) -> tuple[list[PrintingFacts], str | None, bool]:
    """The candidates the legal line's year or the early credit fits, the reading's name (``None`` when
    the card gives neither) and whether it dates the card to the years before numbers were printed.

    Such a date is the printing's own: later reprints print theirs. A later year only rules out
    old-frame printings (a modern line may give a range, or be a stamped reprint's).
    """
    year = int(evidence.copyright_year) if year_is_marked(evidence) else None
    text = "\n".join(t for t in (getattr(evidence, "legal_raw_text", None),
                                 getattr(evidence, "collector_line_raw_text", None)) if t)
    if year is not None and year < FIRST_NUMBERED_YEAR:
        fits = [c for c in candidates if c.set_code in REPRINTS_AS_FIRST_PRINTED or printed_in(year, c)]
        return fits, "legal-year", True
    if year is None and EARLY_CREDIT.search(text):
        fits = [c for c in candidates if c.set_code in REPRINTS_AS_FIRST_PRINTED
                or (c.frame in OLD_FRAMES and released_by(EARLY_CREDIT_LAST_YEAR, c))]
        return fits, "early-credit", True
    if year is not None and any(c.frame in OLD_FRAMES for c in candidates):
        fits = [c for c in candidates if c.frame not in OLD_FRAMES or printed_in(year, c)]
        return fits, ("legal-year" if len(fits) < len(candidates) else None), False
    return candidates, None, False


def fit_printed_readings(evidence: Any, candidates: Sequence[PrintingFacts]) -> PrintedFit:
    """Narrow ``candidates`` by what the card prints; a reading that fits none of them is ignored."""
    plausible = list(candidates)
    readings: list[str] = []
    fits, reading, anchored = _dated_fit(evidence, plausible)
    if reading and fits:
        plausible = fits
        readings.append(reading)
    # A number read means a frame that prints one: an early-looking year there is a misread.
    anchored = anchored and bool(reading and fits) and not getattr(evidence, "collector_number", None)

    seen_border = confident_border(evidence)
    if seen_border and any(border_known(c.border_color) == seen_border for c in plausible):
        plausible = [c for c in plausible if border_known(c.border_color) in (seen_border, None)]
        readings.append("border")

    of_symbol = _symbol_fit(evidence, candidates, plausible)
    if of_symbol:
        plausible = of_symbol
        readings.append("symbol")
        anchored = True

    artist_fits = [c for c in plausible if (artist_ratio(evidence.artist_name, c.artist) or 0) >= ARTIST_MATCH_RATIO]
    if artist_fits:
        plausible = artist_fits
        readings.append("artist")
    return PrintedFit(plausible, readings, anchored)


def _symbol_fit(evidence: Any, candidates: Sequence[PrintingFacts],
                plausible: list[PrintingFacts]) -> list[PrintingFacts]:
    """The plausible printings of the set whose symbol the card prints, when one set wins by a clear
    margin among every set the name was printed in and its printings all have frames that print no
    number (a modern frame's number is the join key's to read); empty otherwise. The List's reprint
    shows its first printing's symbol ("VIS-80" is Visions' card)."""
    read = getattr(evidence, "symbol_shape", None)
    if read is None:
        return []
    winner = symbol_winner(read, {c.set_code: c.symbol_shape for c in candidates})
    if winner is None:
        return []
    fits = [c for c in plausible if c.set_code == winner or (
        c.set_code in REPRINTS_AS_FIRST_PRINTED and c.number_key.startswith(f"{winner}-"))]
    return fits if fits and all(c.frame in OLD_FRAMES for c in fits) else []


def named(printings: Sequence[PrintingFacts]) -> list[str]:
    """``set/number`` of the first few printings, for an abstention's detail."""
    return [f"{c.set_code}/{c.number_key}" for c in printings[:NAMED_FITS]]


def decide_fallback(evidence: Any, candidates: Sequence[PrintingFacts], name: str | None = None) -> Decision:
    unusable = unusable_evidence(evidence, candidates)
    if unusable is not None:
        return unusable
    fit = fit_printed_readings(evidence, candidates)
    hashed = [c for c in fit.printings if c.art_phash is not None] if evidence.art_phash is not None else []
    if hashed:
        return _placed_by_art(evidence, candidates, fit, hashed, name)
    if len(fit.printings) == 1 and fit.anchored:
        return _checked_vote(evidence, candidates, fit.printings[0], CONFIDENCE_PRINTED_READINGS, name,
                             readings=fit.readings)
    if len(fit.printings) > 1 and fit.anchored:
        return abstain(A.AMBIGUOUS, fitting_printings=named(fit.printings), readings=fit.readings)
    return abstain(A.NO_ART_HASH)


def _placed_by_art(evidence: Any, candidates: Sequence[PrintingFacts], fit: PrintedFit,
                   hashed: list[PrintingFacts], name: str | None) -> Decision:
    """The art picks among the printings that fit (or confirms the one left), near and by a margin."""
    readings = ["art", *fit.readings]
    ranked = sorted((hamming(evidence.art_phash, c.art_phash), c.id) for c in hashed)
    best_distance, best_id = ranked[0]
    detail = {"distances": [d for d, _ in ranked[:5]], "nearest_printings": [pid for _, pid in ranked[:5]],
              "readings": readings}
    if best_distance > ART_MAX_DISTANCE:
        return abstain(A.ELIMINATED, **detail)
    if len(ranked) > 1 and ranked[1][0] - best_distance < ART_MARGIN:
        return abstain(A.AMBIGUOUS, fitting_printings=named(fit.printings), **detail)
    printing = next(c for c in hashed if c.id == best_id)
    confidence = CONFIDENCE_SEVERAL_READINGS if len(readings) >= 2 else CONFIDENCE_ART_ONLY
    return _checked_vote(evidence, candidates, printing, confidence, name, **detail)


def _checked_vote(evidence: Any, candidates: Sequence[PrintingFacts], printing: PrintingFacts,
                  confidence: float, name: str | None, **detail: Any) -> Decision:
    """A vote for ``printing`` unless the collector line reads other printings or the title another name."""
    read_as = collector_line_points_to(evidence, candidates)
    if read_as and printing.id not in read_as:
        return abstain(A.READINGS_DISAGREE, collector_line_printings=sorted(read_as), **detail)
    agrees, similarity = title_agreement(getattr(evidence, "title_text", None),
                                         [n for n in (name, printing.printed_name) if n])
    if agrees is False:
        return abstain(A.NAME_DISAGREES, title=evidence.title_text, similarity=similarity, **detail)
    readings = detail.pop("readings", [])
    if agrees:
        readings = [*readings, "title"]
        if confidence == CONFIDENCE_ART_ONLY:
            confidence = CONFIDENCE_SEVERAL_READINGS
    return vote(printing.id, confidence, readings=readings, **detail)


def collector_line_points_to(evidence: Any, candidates: Sequence[PrintingFacts]) -> set[int]:
    """The candidates whose number (and set code, when read) the collector line reads; empty when it
    reads none of them."""
    number = normalize_collector_number(getattr(evidence, "collector_number", None))
    if not number:
        return set()
    return {c.id for c in at_collector_line(candidates, number, read_set_code(evidence))}
