"""The extractor manifest: every extractor's key and version. Bumping a version makes only that
extractor's stored values stale."""

from __future__ import annotations

from types import MappingProxyType

MANIFEST_VERSIONS: MappingProxyType[str, str] = MappingProxyType(
    {
        "fetch_health": "fetch-health-v1",
        # Localisation (issue 11): every image extractor below reads the card found in the upload,
        # so each was bumped when it stopped reading the raw upload.
        "card_localisation": "card-localisation-v1",
        "geometry_bleed": "geometry-bleed-v2",
        "layout_class": "layout-class-v2",
        "crop_coordinates": "crop-coordinates-v2",
        "collector_line_ocr": "collector-line-ocr-v3",  # v3: whole-token language codes, glued numbers
        "collector_line_word_boxes": "collector-line-word-boxes-v2",
        "artist_ocr": "artist-ocr-v3",  # v3: credits in capitals
        "symbol_region": "symbol-region-v2",
        "art_phash": "art-phash-v2",
        "legal_line": "legal-line-v3",  # v3: a year range gives its end
        "quality_signals": "quality-signals-v2",
        "color_profile": "color-profile-v2",
    }
)


def stale_extractors(stored: dict[str, str] | None) -> list[str]:
    """Manifest keys whose stored version is missing or differs from the current one, in manifest order."""
    stored = stored or {}
    return [key for key, version in MANIFEST_VERSIONS.items() if stored.get(key) != version]
