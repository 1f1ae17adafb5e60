"""Stable identities of the Stage D calculators and the named reasons they abstain with.

An agent id never changes between runs: idempotence, pooling and the pass markers rely on it.
Bump the suffix only when a calculator's rules change enough that its past passes should be redone.
"""

from __future__ import annotations

JOIN_KEY_AGENT = "stage-d-join-key-v1"
FALLBACK_AGENT = "stage-d-fallback-v1"
SLOW_PATH_AGENT = "stage-d-slow-path-v1"
MACHINE_AGENT_PREFIX = "stage-d-"
MACHINE_SOURCE = "ocr"

# Pass outcomes that are not abstentions.
OUTCOME_VOTE = "vote"
OUTCOME_NO_MATCH = "no-match"
OUTCOME_TO_REVIEW = "to-review"

# Abstention reasons (scan-log ``reason`` values).
UNREADABLE_IMAGE = "unreadable-image"      # terminal evidence: the fetch failed or the image did not decode
TRUNCATED_IMAGE = "truncated-image"
SEVERAL_CARDS = "several-cards"            # the upload shows more than one card: no reading is this card's
GRADED_SLAB = "graded-slab"                # the card is in a graded slab: the label, not the card, may be read
NO_CANDIDATES = "no-candidates"            # the card's name matches no printing in the catalogue
LOW_DPI = "low-dpi"                        # below 200 dpi the collector line is not trusted
NO_TEXT = "no-text"                        # no collector number was read
AMBIGUOUS = "ambiguous"                    # more than one printing fits
LANGUAGE_MISMATCH = "language-mismatch"
UNKNOWN_SET_CODE = "unknown-set-code"      # the read set code is not in the catalogue's lexicon
NUMBER_NOT_IN_SET = "number-not-in-set"    # the name is in the read set, under another number: likely a misread
NO_SET_CODE_NO_MATCH = "no-set-code-no-match"
BORDER_MISMATCH = "border-mismatch"
FRAME_MISMATCH = "frame-mismatch"
COPYRIGHT_YEAR_MISMATCH = "copyright-year-mismatch"
WEAK_READING = "weak-reading"              # a bare number beside no set code read as printed: too little to vote on
# Item 2 of issue 20: a reading counts only when the catalogue confirms it.
UNCONFIRMED_READING = "unconfirmed-reading"  # no set code, and no printed total that names the number's set
REPAIR_UNCONFIRMED = "repair-unconfirmed"    # a look-alike repair of the number the catalogue does not hold
TOTAL_MISMATCH = "total-mismatch"            # the printed total is not the read set's printed size
NAME_DISAGREES = "name-disagrees"            # the title bar, read with confidence, names another card
# A no-match vote needs a set code read as printed, confirmed, in a set the catalogue holds whole.
SET_CODE_REPAIRED = "set-code-repaired"        # the code is known only after a look-alike repair
SET_CODE_UNCONFIRMED = "set-code-unconfirmed"  # read as printed, but once and without a strong confidence
SET_NOT_COMPLETE = "set-not-complete"          # the catalogue may lack printings of that set
NO_ART_HASH = "no-art-hash"                # fallback: no art hash on the card or on any candidate
ELIMINATED = "eliminated"                  # fallback: no candidate is near enough in art
READINGS_DISAGREE = "readings-disagree"    # fallback: the art points away from what the collector line reads

# Join-key outcomes that hand a card to the fallback (it could not place the card).
JOIN_KEY_UNPLACED = frozenset(
    {
        OUTCOME_NO_MATCH, NO_CANDIDATES, LOW_DPI, NO_TEXT, AMBIGUOUS, LANGUAGE_MISMATCH,
        UNKNOWN_SET_CODE, NUMBER_NOT_IN_SET, NO_SET_CODE_NO_MATCH, BORDER_MISMATCH,
        FRAME_MISMATCH, COPYRIGHT_YEAR_MISMATCH, TRUNCATED_IMAGE, UNREADABLE_IMAGE,
        WEAK_READING, SET_CODE_REPAIRED, SET_CODE_UNCONFIRMED, SET_NOT_COMPLETE,
        UNCONFIRMED_READING, REPAIR_UNCONFIRMED, TOTAL_MISMATCH, SEVERAL_CARDS, GRADED_SLAB, NAME_DISAGREES,
    }
)
