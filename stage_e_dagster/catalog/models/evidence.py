"""Image evidence: Stage C's derived facts about one image. Pixels are never stored."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Mapped, mapped_column

from ..base import Base, created_at, intpk, utcnow

TITLE_TEXT_COMMENT = "the rows at the title end of the card's text, one per line, the name first"
TITLE_CONFIDENCE_COMMENT = "the title rows' mean recogniser score, 0-100"
SYMBOL_SHAPE_COMMENT = "the silhouette of the set symbol at the type line's right end (catalog/symbol_shape.py)"


class ImageEvidence(Base):
    """Evidence for one (card, content hash). A new image gets a new row; old rows stay as history.

    ``extractor_versions`` maps each manifest extractor to the version that last completed on
    this row (a value or a named skip). It is the only staleness signal.
    """

    __tablename__ = "image_evidence"
    __table_args__ = (sa.UniqueConstraint("card_id", "content_hash"),)

    id: Mapped[intpk]
    card_id: Mapped[int] = mapped_column(sa.ForeignKey("cards.id", ondelete="CASCADE"))
    content_hash: Mapped[str] = mapped_column(sa.String(80))
    extractor_versions: Mapped[dict[str, str]] = mapped_column(default=dict)
    skip_reasons: Mapped[dict[str, str]] = mapped_column(default=dict)
    terminal: Mapped[bool] = mapped_column(
        sa.Boolean, default=False, comment="a failed fetch or undecodable image: no re-fetch until the image changes"
    )
    # fetch_health
    fetch_ok: Mapped[bool | None] = mapped_column(sa.Boolean)
    fetch_error_class: Mapped[str | None] = mapped_column(sa.String(32))
    fetch_latency_ms: Mapped[float | None] = mapped_column(sa.Float)
    image_format: Mapped[str | None] = mapped_column(sa.String(16))
    byte_size: Mapped[int | None] = mapped_column(sa.Integer)
    md5: Mapped[str | None] = mapped_column(sa.String(32))
    sha256: Mapped[str | None] = mapped_column(sa.String(64), index=True)
    # card_localisation
    card_quad: Mapped[list[Any] | None] = mapped_column(
        sa.JSON, comment="card corners in source pixels, [[x, y] x4], clockwise from its top-left")
    localisation_confidence: Mapped[float | None] = mapped_column(
        sa.Float, comment="0..1: how sure Stage C is that the quad is the card")
    localisation_rotation: Mapped[int | None] = mapped_column(
        sa.Integer, comment="quarter turns applied to make the card upright: 0, 90, 180 or 270 degrees")
    localisation_tilt_deg: Mapped[float | None] = mapped_column(
        sa.Float, comment="small tilt of the card in the source, degrees")
    localisation_method: Mapped[str | None] = mapped_column(sa.String(16), comment="whole-image, contour or fallback")
    # geometry_bleed, layout_class
    width: Mapped[int | None] = mapped_column(sa.Integer)
    height: Mapped[int | None] = mapped_column(sa.Integer)
    aspect_ratio: Mapped[float | None] = mapped_column(sa.Float)
    bleed_class: Mapped[str | None] = mapped_column(sa.String(16))
    layout_class: Mapped[str | None] = mapped_column(sa.String(16))
    layout_confidence: Mapped[float | None] = mapped_column(
        sa.Float, comment="0..1: below the bar the border / layout reading is not a veto")
    # crop_coordinates and the symbol / legal boxes: {"collector": [l, t, r, b], ...}
    crops: Mapped[dict[str, Any] | None] = mapped_column(sa.JSON)
    # collector_line_ocr, collector_line_word_boxes
    collector_line_raw_text: Mapped[str | None] = mapped_column(sa.Text)
    collector_set_code: Mapped[str | None] = mapped_column(sa.String(16))
    collector_number: Mapped[str | None] = mapped_column(sa.String(16))
    collector_language: Mapped[str | None] = mapped_column(sa.String(8))
    collector_word_boxes: Mapped[list[Any] | None] = mapped_column(sa.JSON)
    # artist_ocr
    artist_raw_text: Mapped[str | None] = mapped_column(sa.Text)
    artist_name: Mapped[str | None] = mapped_column(sa.String(64))
    illus_anchor_fired: Mapped[bool | None] = mapped_column(sa.Boolean)
    # symbol_region, art_phash
    symbol_phash: Mapped[int | None] = mapped_column(sa.BigInteger)
    art_phash: Mapped[int | None] = mapped_column(sa.BigInteger)
    # legal_line
    legal_raw_text: Mapped[str | None] = mapped_column(sa.Text)
    copyright_year: Mapped[int | None] = mapped_column(sa.Integer)
    proxy_marker: Mapped[bool | None] = mapped_column(sa.Boolean)
    # quality_signals, color_profile
    is_truncated: Mapped[bool | None] = mapped_column(sa.Boolean)
    blur_variance: Mapped[float | None] = mapped_column(sa.Float)
    entropy: Mapped[float | None] = mapped_column(sa.Float)
    color_mean_rgb: Mapped[list[Any] | None] = mapped_column(sa.JSON)
    color_stddev_rgb: Mapped[list[Any] | None] = mapped_column(sa.JSON)
    # set_symbol
    symbol_shape: Mapped[bytes | None] = mapped_column(
        sa.LargeBinary(128), comment=SYMBOL_SHAPE_COMMENT)
    # title_ocr
    title_text: Mapped[str | None] = mapped_column(sa.String(200), comment=TITLE_TEXT_COMMENT)
    title_confidence: Mapped[float | None] = mapped_column(sa.Float, comment=TITLE_CONFIDENCE_COMMENT)

    writer: Mapped[str] = mapped_column(sa.String(80), comment="dispatch:<run>, bulk:<id>, or a person")
    run_id: Mapped[str | None] = mapped_column(sa.String(64), index=True)
    created_at: Mapped[created_at]
    updated_at: Mapped[datetime] = mapped_column(default=utcnow, onupdate=utcnow)
