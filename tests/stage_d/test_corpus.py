"""Stage C then Stage D over a rendered, labelled synthetic corpus: the issue's figures."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa

from stage_e_dagster.corpus.seed import seed_corpus
from stage_e_dagster.evaluation.labels import load_labels
from stage_e_dagster.evaluation.stage_d import cast_label_votes, evaluate_stage_d
from stage_e_dagster.stage_c.fetch import ImageFetcher
from stage_e_dagster.stage_c.run import run_stage_c
from stage_e_dagster.stage_d.run import run_stage_d

pytestmark = [pytest.mark.slow]


# 60 cards: each costs Stage C's full PP-OCR read (about 0.6 s a card), and the figures hold at this size.
CARDS = 60


def test_precision_and_no_wrong_resolutions(sqlite_engine: sa.Engine, tmp_path: Path) -> None:
    summary = seed_corpus(sqlite_engine, tmp_path / "corpus", cards=CARDS, seed=5)
    with ImageFetcher(engine=sqlite_engine, image_roots=[tmp_path / "corpus"], allowed_hosts=[], timeout_s=10,
                      max_bytes=25 << 20, rate_per_sec=100) as fetcher:
        run_stage_c(sqlite_engine, None, writer="bulk:test", run_id="test-c", fetcher=fetcher)
    report = run_stage_d(sqlite_engine, None, run_id="test-d")
    labels = load_labels(summary.labels_path)

    figures = evaluate_stage_d(sqlite_engine, labels)
    print("after Stage C and D:", figures)
    assert report.cards_considered == CARDS
    assert figures["machine_votes"] >= CARDS * 5 // 6
    assert figures["vote_precision"] >= 0.995
    assert figures["coverage"] >= 0.85
    assert figures["resolved_cards"] == figures["no_match_cards"] == 0  # machine votes alone resolve nothing

    assert cast_label_votes(sqlite_engine, labels, share=0.5, voters=1, seed=1) == CARDS // 2
    after_one = evaluate_stage_d(sqlite_engine, labels)
    assert after_one["resolved_cards"] == 0  # one user plus one machine vote is 1.5 < 2
    cast_label_votes(sqlite_engine, labels, share=0.4, voters=2, seed=2, user_prefix="pair")
    after_two = evaluate_stage_d(sqlite_engine, labels)
    print("after human votes:", after_two)
    assert after_two["resolved_cards"] >= CARDS // 3
    assert after_two["wrong_resolutions"] == 0
