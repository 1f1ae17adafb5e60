"""The extractor manifest, as Stage C names it; the map itself lives with the other evidence facts
both stages share (:mod:`stage_e_dagster.catalog.evidence_facts`)."""

from __future__ import annotations

from ..catalog.evidence_facts import MANIFEST_VERSIONS, stale_extractors

__all__ = ["MANIFEST_VERSIONS", "stale_extractors"]
