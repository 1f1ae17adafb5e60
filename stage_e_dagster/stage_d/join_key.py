"""The join-key calculator: (set code, collector number) within the printings of the card's name.

Pure: it takes a card's stored evidence and its name-scoped candidates and returns a decision.
A vote needs a reading that stands on its own (a number printed in a collector form, or a set code
read as printed) that the catalogue confirms: the set code read names a set holding that number
for the name, or, with no set code read (or one the catalogue does not know), the total printed
after the number ("041/281") is the printed size of exactly the set that holds it. A letter read
for the number's first digit ("t74/274") is repaired to the digit it looks like only when the
catalogue confirms the repaired number the same way. A number alone, unconfirmed, is a weak
reading and never a vote. A vote must also pass the agreement checks (truncation, a confidently read border colour,
frame, a marked copyright year); an artist disagreement keeps the vote at lower confidence. A
no-match vote needs more: a set code read as printed (no look-alike repair) and confirmed, in a
set the catalogue holds completely, that has no printing of this name. Anything less abstains, and
the slow path sends the card to a person.
"""

from __future__ import annotations

from typing import Any, Sequence

from ..catalog.collector_line import normalize_collector_number
from . import agents as A
from .decision import (
    ARTIST_MATCH_RATIO,
    Decision,
    abstain,
    artist_ratio,
    at_collector_line,
    border_known,
    confident_border,
    no_match,
    read_set_code,
    title_agreement,
    unusable_evidence,
    vote,
)
from .facts import PrintingFacts
from .readings import read_collector, year_is_marked

MIN_TRUSTED_DPI = 200
COPYRIGHT_SLACK_YEARS = 2
OLD_FRAMES = frozenset({"1993", "1997"})

CONFIDENCE_SET_AND_NUMBER = 0.85
CONFIDENCE_NUMBER_AND_TOTAL = 0.8
CONFIDENCE_NUMBER_ONLY = 0.75      # kept for the fallback's readings; the join key no longer votes on it
CONFIDENCE_REPAIRED = 0.7
CONFIDENCE_TITLE_BONUS = 0.05      # the title bar reads the upload's name
CONFIDENCE_TITLE_CAP = 0.9
CONFIDENCE_ARTIST_DISAGREES = 0.65
CONFIDENCE_NO_MATCH = 0.6


def decide_join_key(
    evidence: Any, candidates: Sequence[PrintingFacts], lexicon: frozenset[str], dpi: int | None = None,
    complete_sets: frozenset[str] = frozenset(), name: str | None = None,
) -> Decision:
    """Decide one card. ``evidence`` is its current ImageEvidence (or anything with the same fields);
    ``complete_sets`` are the set codes whose every printing the catalogue holds (no-match needs one);
    ``name`` is the name the upload carries, compared with the title bar Stage C read."""
    unusable = unusable_evidence(evidence, candidates)
    if unusable is not None:
        return unusable
    if dpi is not None and dpi < MIN_TRUSTED_DPI:
        return abstain(A.LOW_DPI, dpi=dpi)
    number = normalize_collector_number(evidence.collector_number)
    if not number:
        return abstain(A.NO_TEXT)
    set_code = read_set_code(evidence)
    read = {"set_code": set_code, "number": number}
    reading = read_collector(evidence)
    if not reading.number_in_collector_form and not (set_code and reading.set_code_as_printed):
        return abstain(A.WEAK_READING, **read)

    hits = at_collector_line(candidates, number, set_code)
    confirmed_by = "set-code" if set_code and hits else None
    if reading.printed_total is not None and hits and set_code:
        sizes = {c.printed_size for c in hits if c.printed_size is not None}
        if sizes and reading.printed_total not in sizes:
            return abstain(A.TOTAL_MISMATCH, total=reading.printed_total, **read)
    if not confirmed_by and (set_code is None or (set_code not in lexicon and not reading.set_code_confirmed)):
        # No set code confirmed a printing (none read, or an unknown one that is no clean, confident
        # read: a code printed clearly but unknown may be a set the catalogue lacks). The printed
        # total may, for the number as read or for its look-alike repair; more than one way
        # confirmed is no confirmation.
        options = [("printed-total", number, None, by_printed_total(candidates, number, reading.printed_total))]
        options += [("look-alike-repair", r.number, r.printed, by_printed_total(candidates, r.number, r.total))
                    for r in reading.repairs if r.number != number]
        options = [o for o in options if o[3]]
        if len(options) > 1:
            return abstain(A.AMBIGUOUS, hits=[c.id for o in options for c in o[3]], **read)
        if options:
            confirmed_by, repaired_number, read_as, hits = options[0]
            if read_as is not None:
                read = {**read, "number": repaired_number, "read_as": read_as}
        elif set_code is None and reading.repairs:
            return abstain(A.REPAIR_UNCONFIRMED, repairs=[r.printed for r in reading.repairs], **read)
        elif set_code is None and hits:
            # The number alone matched: nothing in the catalogue confirms it is this printing's.
            return abstain(A.UNCONFIRMED_READING, total=reading.printed_total, **read)
    elif not hits and set_code in lexicon:
        # A known set without the number as read: its look-alike repair may be in that set.
        in_set = [(r, found) for r in reading.repairs if r.number != number
                  for found in [at_collector_line(candidates, r.number, set_code)] if found]
        if len(in_set) == 1:
            (repair, hits), = in_set
            confirmed_by = "look-alike-repair"
            read = {**read, "number": repair.number, "read_as": repair.printed}
    read = {**read, "confirmed_by": confirmed_by} if confirmed_by else read
    lang = (evidence.collector_language or "").strip().lower() or None
    if hits and lang:
        same_lang = [c for c in hits if c.lang == lang]
        if not same_lang:
            return abstain(A.LANGUAGE_MISMATCH, lang=lang, **read)
        hits = same_lang
    elif len(hits) > 1 and len({c.lang for c in hits}) > 1:
        english = [c for c in hits if c.lang == "en"]
        hits = english if len(english) == 1 else hits

    if not hits:
        if set_code is None:
            return abstain(A.NO_SET_CODE_NO_MATCH, **read)
        if set_code not in lexicon:
            return abstain(A.UNKNOWN_SET_CODE, **read)
        if any(c.set_code == set_code for c in candidates):
            return abstain(A.NUMBER_NOT_IN_SET, **read)
        if not reading.set_code_as_printed:
            return abstain(A.SET_CODE_REPAIRED, **read)
        if not reading.set_code_confirmed:
            return abstain(A.SET_CODE_UNCONFIRMED, confidence=reading.set_code_confidence, **read)
        if not reading.number_in_collector_form:
            return abstain(A.WEAK_READING, **read)
        if set_code not in complete_sets:
            return abstain(A.SET_NOT_COMPLETE, **read)
        return no_match(CONFIDENCE_NO_MATCH, **read)
    if len(hits) > 1:
        # A border read confidently on the card may single one out; an unsure one never decides.
        seen = confident_border(evidence)
        by_border = [c for c in hits if seen and border_known(c.border_color) == seen]
        if len(by_border) != 1:
            return abstain(A.AMBIGUOUS, hits=[c.id for c in hits], **read)
        hits = by_border

    printing = hits[0]
    failed = agreement_failure(evidence, printing)
    if failed is not None:
        return abstain(failed, printing_id=printing.id, **read)
    confidence = {"set-code": CONFIDENCE_SET_AND_NUMBER, "printed-total": CONFIDENCE_NUMBER_AND_TOTAL,
                  "look-alike-repair": CONFIDENCE_REPAIRED}.get(confirmed_by or "", CONFIDENCE_NUMBER_ONLY)
    ratio = artist_ratio(evidence.artist_name, printing.artist)
    if ratio is not None and ratio < ARTIST_MATCH_RATIO:
        confidence = CONFIDENCE_ARTIST_DISAGREES
    # The title bar: the upload's name, or the printing's own printed name (another language).
    agrees, similarity = title_agreement(getattr(evidence, "title_text", None),
                                         [n for n in (name, printing.printed_name) if n])
    if agrees is False:
        return abstain(A.NAME_DISAGREES, printing_id=printing.id, title=evidence.title_text, similarity=similarity,
                       **read)
    if agrees:
        confidence = min(CONFIDENCE_TITLE_CAP, round(confidence + CONFIDENCE_TITLE_BONUS, 3))
        read = {**read, "title_agrees": similarity}
    return vote(printing.id, confidence, **read)


def by_printed_total(candidates: Sequence[PrintingFacts], number: str, total: int | None) -> list[PrintingFacts]:
    """The candidates at ``number`` in a set whose printed size is ``total`` (none without a total)."""
    if total is None:
        return []
    return [c for c in candidates if c.number_key == number and c.printed_size == total]


def agreement_failure(evidence: Any, printing: PrintingFacts) -> str | None:
    """The first agreement check the would-be match fails, or None when it passes them all.

    The border and the copyright year veto only when they were read with confidence: a border
    reading off the card (a table, a sleeve) or a year not beside a copyright mark is recorded in
    the evidence but is no reason to refuse a collector line that reads cleanly.
    """
    seen_border = confident_border(evidence)
    printed_border = border_known(printing.border_color)
    if seen_border and printed_border and seen_border != printed_border:
        return A.BORDER_MISMATCH
    # A parsed collector number means a modern bottom line; 1993/1997 frames print none this way.
    if printing.frame in OLD_FRAMES:
        return A.FRAME_MISMATCH
    year = evidence.copyright_year if year_is_marked(evidence) else None
    if year and printing.released_at is not None and year < printing.released_at.year - COPYRIGHT_SLACK_YEARS:
        return A.COPYRIGHT_YEAR_MISMATCH
    return None
