"""The fallback calculator, for cards the join key could not place: art hash plus sub-checks.

Candidates are the printings of the card's name. A border colour read confidently on the card and
the artist credit narrow them when they give a reading (a reading that fits no candidate is
treated as an OCR miss, not as a veto). Old frames (1993, 1997) print no collector number, but
their legal line gives the year they were printed in: a card whose line reads "(c) 1995" was not
printed in 1994, nor years later, so that year narrows them too. The art perceptual hash then has
to single out exactly one printing, near enough and by a clear margin over the next, and must not
contradict the printings the collector line reads as. A title read with confidence as another
name blocks the vote. It never votes no-match.
"""

from __future__ import annotations

from typing import Any, Sequence

from ..catalog.collector_line import normalize_collector_number
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

ART_MAX_DISTANCE = 10      # of 64 bits: re-encoded, rescaled uploads of the same art stay well inside
ART_MARGIN = 8             # the runner-up must be at least this much further away
CONFIDENCE_SEVERAL_READINGS = 0.8
CONFIDENCE_ART_ONLY = 0.7
OLD_FRAMES = frozenset({"1993", "1997"})
# A printing's release may fall in the year after the one its legal line gives (printed in December).
PRINTED_YEAR_SLACK = 1


def printed_in(year: int, printing: PrintingFacts) -> bool:
    """Whether ``printing`` could carry a legal line of ``year``: released that year or the next
    (an unknown release date never rules a printing out)."""
    if printing.released_at is None:
        return True
    return year <= printing.released_at.year <= year + PRINTED_YEAR_SLACK


def decide_fallback(evidence: Any, candidates: Sequence[PrintingFacts], name: str | None = None) -> Decision:
    unusable = unusable_evidence(evidence, candidates)
    if unusable is not None:
        return unusable
    readings = ["art"]
    plausible = list(candidates)

    year = evidence.copyright_year if year_is_marked(evidence) else None
    if year and any(c.frame in OLD_FRAMES for c in plausible):
        # Old frames: the year the legal line gives is the year the card was printed.
        of_year = [c for c in plausible if c.frame not in OLD_FRAMES or printed_in(int(year), c)]
        if of_year and len(of_year) < len(plausible):
            plausible = of_year
            readings.append("legal-year")

    seen_border = confident_border(evidence)
    if seen_border:
        if any(border_known(c.border_color) == seen_border for c in plausible):
            plausible = [c for c in plausible if border_known(c.border_color) in (seen_border, None)]
            readings.append("border")

    artist_fits = [c for c in plausible if (artist_ratio(evidence.artist_name, c.artist) or 0) >= ARTIST_MATCH_RATIO]
    if artist_fits:
        plausible = artist_fits
        readings.append("artist")

    if evidence.art_phash is None:
        return abstain(A.NO_ART_HASH)
    ranked = sorted(
        (hamming(evidence.art_phash, c.art_phash), c.id) for c in plausible if c.art_phash is not None
    )
    if not ranked:
        return abstain(A.NO_ART_HASH)
    best_distance, best_id = ranked[0]
    detail = {"distances": [d for d, _ in ranked[:5]], "nearest_printings": [pid for _, pid in ranked[:5]],
              "readings": readings}
    if best_distance > ART_MAX_DISTANCE:
        return abstain(A.ELIMINATED, **detail)
    if len(ranked) > 1 and ranked[1][0] - best_distance < ART_MARGIN:
        return abstain(A.AMBIGUOUS, **detail)
    read_as = collector_line_points_to(evidence, candidates)
    if read_as and best_id not in read_as:
        return abstain(A.READINGS_DISAGREE, collector_line_printings=sorted(read_as), **detail)
    printing = next(c for c in plausible if c.id == best_id)
    agrees, similarity = title_agreement(getattr(evidence, "title_text", None),
                                         [n for n in (name, printing.printed_name) if n])
    if agrees is False:
        return abstain(A.NAME_DISAGREES, title=evidence.title_text, similarity=similarity, **detail)
    if agrees:
        readings.append("title")
    confidence = CONFIDENCE_SEVERAL_READINGS if len(readings) >= 2 else CONFIDENCE_ART_ONLY
    return vote(best_id, confidence, **detail)


def collector_line_points_to(evidence: Any, candidates: Sequence[PrintingFacts]) -> set[int]:
    """The candidates whose number (and set code, when read) the collector line reads; empty when it
    reads none of them."""
    number = normalize_collector_number(getattr(evidence, "collector_number", None))
    if not number:
        return set()
    return {c.id for c in at_collector_line(candidates, number, read_set_code(evidence))}
