"""What a calculator decided for one card: a printing vote, a no-match vote, or a named abstention."""

from __future__ import annotations

from dataclasses import dataclass, field
from difflib import SequenceMatcher
from typing import Any, Sequence

from ..catalog.evidence_facts import GRADED_SLAB, LAYOUT_CONFIDENCE_BAR, SEVERAL_CARDS
from . import agents as A
from .agents import OUTCOME_NO_MATCH, OUTCOME_VOTE

ARTIST_MATCH_RATIO = 0.8
BORDER_VOCABULARY = frozenset({"black", "white", "silver", "borderless", "gold"})
# A border reading counts against a match only when Stage C is this sure it read the card itself
# (its ``layout_confidence``, against the shared bar for "the quad is the card", 0.5). Below
# it, or with no confidence recorded, the reading may be the table, sleeve or top-loader.
BORDER_VETO_CONFIDENCE = LAYOUT_CONFIDENCE_BAR


@dataclass(frozen=True)
class Decision:
    kind: str                      # "vote", "no-match" or "abstain"
    printing_id: int | None = None
    confidence: float | None = None
    reason: str | None = None      # the abstention reason
    detail: dict[str, Any] = field(default_factory=dict)

    @property
    def outcome(self) -> str:
        """The pass-marker outcome: ``vote``, ``no-match`` or the abstention reason."""
        return self.reason if self.kind == "abstain" else self.kind  # type: ignore[return-value]

    @property
    def is_vote(self) -> bool:
        return self.kind in (OUTCOME_VOTE, OUTCOME_NO_MATCH)


def vote(printing_id: int, confidence: float, **detail: Any) -> Decision:
    return Decision(OUTCOME_VOTE, printing_id=printing_id, confidence=confidence, detail=detail)


def no_match(confidence: float, **detail: Any) -> Decision:
    return Decision(OUTCOME_NO_MATCH, confidence=confidence, detail=detail)


def abstain(reason: str, **detail: Any) -> Decision:
    return Decision("abstain", reason=reason, detail=detail)


def artist_ratio(read: str | None, printed: str | None) -> float | None:
    """Fuzzy similarity of an OCR'd artist credit and a printing's artist; None when either is blank."""
    if not read or not printed:
        return None
    return SequenceMatcher(None, read.strip().lower(), printed.strip().lower()).ratio()


# The title bar's name agrees with the upload's at this similarity, and disagrees below the lower bar
# (in between it says nothing). Fewer letters than TITLE_MIN_LETTERS are no reading.
TITLE_AGREES = 0.8
TITLE_DISAGREES = 0.5
TITLE_MIN_LETTERS = 5


def _letters(text: str) -> str:
    return "".join(ch for ch in text.casefold() if ch.isalpha())


def title_agreement(title: str | None, names: Sequence[str]) -> tuple[bool | None, float | None]:
    """Whether the name Stage C read at the title end is one of ``names`` (each face of a
    ``Front // Back`` name counts): True, False, or None when the read says too little; with the
    best similarity. ``title`` holds the title end's rows, one per line (the name, the type line):
    the row that is most like a name speaks. A read that is the start of a name agrees as much as
    the whole name."""
    reads = [_letters(row) for row in (title or "").splitlines()]
    reads = [r for r in reads if len(r) >= TITLE_MIN_LETTERS]
    faces = [_letters(face) for name in names if name for face in name.split("//")]
    faces = [f for f in faces if f]
    if not reads or not faces:
        return None, None
    best = max(max(SequenceMatcher(None, read, face).ratio(), SequenceMatcher(None, read, face[:len(read)]).ratio())
               for read in reads for face in faces)
    if best >= TITLE_AGREES:
        return True, round(best, 3)
    return (False if best < TITLE_DISAGREES else None), round(best, 3)


def border_known(value: str | None) -> str | None:
    value = (value or "").strip().lower()
    return value if value in BORDER_VOCABULARY else None


def confident_border(evidence: Any) -> str | None:
    """The border colour read on the card when Stage C is confident it is the card's; else None."""
    confidence = getattr(evidence, "layout_confidence", None)
    if confidence is None or confidence < BORDER_VETO_CONFIDENCE:
        return None
    return border_known(evidence.layout_class)


def image_unreadable(evidence: Any) -> bool:
    return bool(evidence.terminal) or evidence.fetch_ok is False


def unusable_evidence(evidence: Any, candidates: Sequence[Any]) -> Decision | None:
    """The abstention every calculator makes before looking at readings, or ``None`` to go on."""
    if image_unreadable(evidence):
        return abstain(A.UNREADABLE_IMAGE)
    if evidence.is_truncated:
        return abstain(A.TRUNCATED_IMAGE)
    crowded = {SEVERAL_CARDS: A.SEVERAL_CARDS, GRADED_SLAB: A.GRADED_SLAB}.get(
        getattr(evidence, "localisation_method", None) or "")
    if crowded is not None:
        return abstain(crowded)
    if not candidates:
        return abstain(A.NO_CANDIDATES)
    return None


def read_set_code(evidence: Any) -> str | None:
    """The collector line's set code as the calculators compare it: lower case, None when unread."""
    return (getattr(evidence, "collector_set_code", None) or "").strip().lower() or None


def at_collector_line(candidates: Sequence[Any], number: str, set_code: str | None) -> list[Any]:
    """The candidates at the collector line's (normalised) number, and at its set code when one was read."""
    return [c for c in candidates if c.number_key == number and (set_code is None or c.set_code == set_code)]
