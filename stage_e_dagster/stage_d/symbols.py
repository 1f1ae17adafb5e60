"""Which set's symbol a card prints, from stored shapes only: pure, no database, no Dagster.

The fallback places a frame that prints no collector number among the sets its name was printed in;
the symbol at the type line's right end tells most of them apart (issue 41). Stage C stores the
silhouette it read (``ImageEvidence.symbol_shape``), ``stage-e catalog fetch-symbols`` each set's
(``Expansion.symbol_shape``, loaded as ``PrintingFacts.symbol_shape``); both are made by
:mod:`~stage_e_dagster.catalog.symbol_shape` and compared by overlap. A set whose cards print no
symbol (core sets before Sixth Edition, ``PRINTS_NO_SYMBOL``) is ranked last, unscored, and never wins,
whatever icon the catalogue holds for it.
"""

from __future__ import annotations

from typing import Mapping

from ..catalog.symbol_shape import shape_overlap

# The clear-margin rule, tuned on the real photos (docs/stage-d.md): the best set's overlap must reach
# SYMBOL_MIN_OVERLAP and beat the next set's by SYMBOL_MARGIN. The closest wrong call seen was Rise of
# the Eldrazi read as Worldwake (two diamonds): 0.81 against 0.66, a margin of 0.147.
SYMBOL_MIN_OVERLAP = 0.65
SYMBOL_MARGIN = 0.16

# Sets whose cards print no symbol, though Scryfall (and Keyrune) draw them an icon: the core sets before
# Sixth Edition, their collectors' and foreign black-bordered editions, and Summer Magic.
PRINTS_NO_SYMBOL = frozenset({"lea", "leb", "2ed", "3ed", "4ed", "5ed", "sum", "ced", "cei", "fbb", "4bb"})


def rank_symbols(read_shape: bytes, set_shapes: Mapping[str, bytes | None]) -> list[tuple[str, float | None]]:
    """Each set with the overlap of its symbol and the one read, best first (ties by set code); sets
    without a symbol follow with None, so a caller can say they were looked at."""
    shaped = {code: shape for code, shape in set_shapes.items() if code.lower() not in PRINTS_NO_SYMBOL}
    scored = sorted(((code, shape_overlap(read_shape, shape)) for code, shape in shaped.items()
                     if shape is not None), key=lambda item: (-item[1], item[0]))
    unscored = sorted((code, None) for code in set_shapes if shaped.get(code) is None)
    return [(code, round(score, 4)) for code, score in scored] + unscored


def symbol_winner(read_shape: bytes | None, set_shapes: Mapping[str, bytes | None]) -> str | None:
    """The one set whose symbol the card clearly prints, or None (abstain): nothing read, no set with a
    symbol, the best overlap under ``SYMBOL_MIN_OVERLAP``, or a runner-up within ``SYMBOL_MARGIN``. A
    single set with a symbol must still reach ``SYMBOL_MIN_OVERLAP + SYMBOL_MARGIN``: with no rival to
    beat, it must look like the read on its own."""
    if read_shape is None:
        return None
    scored = [(code, score) for code, score in rank_symbols(read_shape, set_shapes) if score is not None]
    if not scored:
        return None
    best_code, best = scored[0]
    runner_up = scored[1][1] if len(scored) > 1 else SYMBOL_MIN_OVERLAP
    if best < SYMBOL_MIN_OVERLAP or best - runner_up < SYMBOL_MARGIN:
        return None
    return best_code
