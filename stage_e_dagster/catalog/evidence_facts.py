"""What Stage C writes and Stage D reads must mean the same in both: the facts of stored evidence.

Stage D reads evidence rows, never images, and never imports Stage C; the few rules both stages
apply to the same rows live here, below both: the extractor manifest and what makes a row
current, the Hamming distance between stored hashes, the confidence bar below which a border
reading may be of the background rather than the card, and the localisation outcomes no reading
may be trusted on.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Iterable

import sqlalchemy as sa
from sqlalchemy.orm import Session

from .models import Card, ImageEvidence

# Every extractor's key and version. Bumping a version makes only that extractor's stored values stale.
MANIFEST_VERSIONS: MappingProxyType[str, str] = MappingProxyType(
    {
        "fetch_health": "fetch-health-v1",
        # Localisation (issue 11): every image extractor below reads the card found in the upload,
        # so each was bumped when it stopped reading the raw upload.
        # Issue 30: the text is read by PP-OCR where it is in the upload (not in the localised card's
        # bottom band), so every extractor fed by the text, and the 180 turn and several-cards call it
        # makes for the localisation, moved to a new version. Issue 39: the text is read on the card when
        # the localiser is sure of it (word boxes in the card's frame), closer only where the catalogue
        # confirms nothing, so the same extractors moved again; and again when each crop was recognised at its
        # own width (not padded to 320 px) and a number read without its rarity letter or an early credit
        # settled the read; and again when the last resort across a card read only its collector end's rows,
        # a tall band was detected in three parts, not two larger ones, and an upload taken whole whose
        # read reached the legal line was no longer read again as an upload; and again when the last
        # resort was no longer taken for a legal line the first look and the narrow band read alike; and
        # again when an upload taken whole whose first look on the card found almost no text went to the
        # read as an upload without the card's bands.
        "card_localisation": "card-localisation-v8",  # v8: the 180 turn and several cards from the text as now read
        "geometry_bleed": "geometry-bleed-v2",
        "layout_class": "layout-class-v3",  # v3: the confidence is the reading's own agreement too
        "crop_coordinates": "crop-coordinates-v2",
        # collector_line_ocr v10: no card bands after a first look that found almost no text.
        "collector_line_ocr": "collector-line-ocr-v10",
        "collector_line_word_boxes": "collector-line-word-boxes-v8",  # v8: boxes of the read as now made
        "artist_ocr": "artist-ocr-v9",  # v9: from the rows as now read
        "symbol_region": "symbol-region-v2",
        "art_phash": "art-phash-v2",
        "legal_line": "legal-line-v10",  # v10: from the rows as now read
        "quality_signals": "quality-signals-v2",
        "color_profile": "color-profile-v2",
        "title_ocr": "title-ocr-v7",  # v7: the title as now read
        # Issue 41: the set symbol's silhouette, which Stage D compares with each set's rendered icon.
        "set_symbol": "set-symbol-v1",
    }
)

# Card localisation confidence below which a quad is not taken as the card: a border read below it
# may be of the table, sleeve or top-loader, so Stage D must not veto on it.
LAYOUT_CONFIDENCE_BAR = 0.5

# Localisation outcomes of an upload that shows more than one card, or a card in a graded slab:
# whatever card Stage C read there, Stage D must abstain (stored as ``localisation_method``).
SEVERAL_CARDS = "several-cards"
GRADED_SLAB = "graded-slab"
CROWDED_LOCALISATIONS = frozenset({SEVERAL_CARDS, GRADED_SLAB})


def stale_extractors(stored: dict[str, str] | None) -> list[str]:
    """Manifest keys whose stored version is missing or differs from the current one, in manifest order."""
    stored = stored or {}
    return [key for key, version in MANIFEST_VERSIONS.items() if stored.get(key) != version]


def present_evidence(session: Session, card_ids: Iterable[int]) -> dict[int, ImageEvidence]:
    """Each card's evidence row for its present image, current or stale; cards without one are absent."""
    ids = list(card_ids)
    if not ids:
        return {}
    rows = session.execute(
        sa.select(ImageEvidence)
        .join(Card, sa.and_(Card.id == ImageEvidence.card_id, Card.content_hash == ImageEvidence.content_hash))
        .where(ImageEvidence.card_id.in_(ids))
    ).scalars()
    return {row.card_id: row for row in rows}


def current_evidence(session: Session, card_ids: Iterable[int]) -> dict[int, ImageEvidence]:
    """Each card's current evidence: taken from its present image (content hash equal to the card's)
    with every manifest extractor at its current version. Cards without one are absent."""
    return {
        card_id: ev
        for card_id, ev in present_evidence(session, card_ids).items()
        if not stale_extractors(ev.extractor_versions)
    }


def hamming(a: int, b: int) -> int:
    """Bits that differ between two 64-bit hashes stored as signed integers."""
    return bin((a ^ b) & 0xFFFFFFFFFFFFFFFF).count("1")
