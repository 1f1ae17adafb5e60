"""The slow-path router: cards neither calculator could place go to human review.

It casts no vote. Its scan-log marker carries what a reviewer needs to decide without opening
the evidence table: what was read, what the other calculators concluded, and the candidates.
"""

from __future__ import annotations

from typing import Any, Sequence

REVIEW_FIELDS = (
    "collector_line_raw_text", "collector_set_code", "collector_number", "collector_language",
    "layout_class", "bleed_class", "artist_name", "illus_anchor_fired", "copyright_year",
    "proxy_marker", "is_truncated", "fetch_ok", "terminal", "art_phash", "symbol_phash",
)
MAX_CANDIDATES_SHOWN = 20


def review_packet(
    evidence: Any, candidate_ids: Sequence[int], join_key_outcome: str | None, fallback_outcome: str | None
) -> dict[str, Any]:
    """The evidence a reviewer sees for one routed card (JSON-ready)."""
    packet: dict[str, Any] = {name: getattr(evidence, name, None) for name in REVIEW_FIELDS}
    packet["content_hash"] = evidence.content_hash
    packet["join_key"] = join_key_outcome
    packet["fallback"] = fallback_outcome
    packet["candidate_printing_ids"] = list(candidate_ids[:MAX_CANDIDATES_SHOWN])
    packet["candidate_count"] = len(candidate_ids)
    return packet
