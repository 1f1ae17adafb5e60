"""Stage C's view of current evidence: the shared definition (:mod:`stage_e_dagster.catalog.evidence_facts`,
which Stage D reads too) plus what makes a row need no further Stage C work."""

from __future__ import annotations

from ..catalog.evidence_facts import current_evidence, present_evidence, stale_extractors
from ..catalog.models import ImageEvidence

__all__ = ["current_evidence", "present_evidence", "satisfies_stage_c"]


def satisfies_stage_c(evidence: ImageEvidence | None) -> bool:
    """Stage C has nothing to do for this present-image row: it is current, or it is a terminal
    record (a failed fetch or undecodable image waits for the image to change, not for a version bump)."""
    return evidence is not None and (evidence.terminal or not stale_extractors(evidence.extractor_versions))
