"""The extractor manifest: every extractor's key and version. Bumping a version makes only that
extractor's stored values stale."""

from __future__ import annotations

from types import MappingProxyType

MANIFEST_VERSIONS: MappingProxyType[str, str] = MappingProxyType(
    {
        "fetch_health": "fetch-health-v1",
        "geometry_bleed": "geometry-bleed-v1",
        "layout_class": "layout-class-v1",
        "crop_coordinates": "crop-coordinates-v1",
        "collector_line_ocr": "collector-line-ocr-v1",
        "collector_line_word_boxes": "collector-line-word-boxes-v1",
        "artist_ocr": "artist-ocr-v1",
        "symbol_region": "symbol-region-v1",
        "art_phash": "art-phash-v1",
        "legal_line": "legal-line-v1",
        "quality_signals": "quality-signals-v1",
        "color_profile": "color-profile-v1",
    }
)


def stale_extractors(stored: dict[str, str] | None) -> list[str]:
    """Manifest keys whose stored version is missing or differs from the current one, in manifest order."""
    stored = stored or {}
    return [key for key, version in MANIFEST_VERSIONS.items() if stored.get(key) != version]
