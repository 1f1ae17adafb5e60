"""Smoke tests: each dispatch benchmark runs end to end at a tiny size and prints its ratio lines.

They check that the benchmarks still run against the current code, never how fast anything is.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from stage_e_dagster.corpus.photo import CONDITIONS

BENCH = Path(__file__).resolve().parents[2] / "bench"
NUMBER = r"[-+]?\d+\.\d+"
# An idle card_created tick watches for new cards for STAGE_E_ARRIVAL_WAIT_S (3.5 s) before it returns: in the
# tick benches' smoke runs that wait was most of every timed tick, and most of the run. The watch is
# test_arrivals.py's to check; here a tick returns at once, as in the other tests that tick sensors.
NO_WATCH = {"STAGE_E_ARRIVAL_WAIT_S": "0"}


def run_bench(script: str, *args: str, timeout: int = 300, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        [sys.executable, str(BENCH / script), *args], capture_output=True, text=True, timeout=timeout,
        env={**os.environ, **(env or {})},
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


def tick_ratio_lines(out: str, label: str) -> dict[str, float]:
    found = {}
    for kind in ("backlog", "idle"):
        match = re.search(rf"^\[{label}\] ratio {kind} tick 2k/200: median ({NUMBER})  p90 ({NUMBER})", out, re.M)
        assert match, out
        found[kind] = float(match.group(1))
    return found


SMALL_TICK = ("--sizes", "200,2000", "--backlog", "20", "--reps", "3", "--warmup", "1")


@pytest.mark.slow
def test_sensor_tick_bench_prints_its_ratio_on_sqlite() -> None:
    out = run_bench("sensor_tick.py", *SMALL_TICK, env=NO_WATCH)
    ratios = tick_ratio_lines(out, "sqlite")
    assert all(r > 0 for r in ratios.values())
    assert re.search(r"^\[sqlite\] backlog tick,\s+2k cards: median\s+" + NUMBER + r" ms\s+p90", out, re.M), out


@pytest.mark.slow
@pytest.mark.postgres
def test_sensor_tick_bench_prints_its_ratio_on_postgres() -> None:
    out = run_bench("sensor_tick.py", *SMALL_TICK, "--postgres", "--explain", env=NO_WATCH)
    assert all(r > 0 for r in tick_ratio_lines(out, "postgres").values())
    assert "Index Scan" in out or "Seq Scan" in out, out  # the plan of the tick's slowest cards query


@pytest.mark.slow
def test_end_to_end_bench_prints_throughput_ratios_and_overhead() -> None:
    # Two runs of 2 cards and one of 4 in each arm; the daemon arm's two slots let its runs of 2 start together.
    out = run_bench("end_to_end.py", "--cards", "4", "--sizes", "2,4", "--launched", "1", "--daemon",
                    "--daemon-concurrency", "2", timeout=600)
    for size in (2, 4):
        assert re.search(rf"^\[batch {size}\] ratio dagster/plain throughput: {NUMBER}", out, re.M), out
        assert re.search(rf"^\[batch {size}\] per-run fixed overhead .*median {NUMBER} s", out, re.M), out
        assert re.search(rf"^\[batch {size}\] launched run .*ratio launched/plain time {NUMBER}", out, re.M), out
        daemon = rf"^\[batch {size}\] ratio daemon/plain throughput: {NUMBER} from daemon start"
        assert re.search(daemon, out, re.M), out
    assert re.search(rf"^ratio overhead per card, batch 4 vs batch 2: {NUMBER} / {NUMBER} ms per card", out, re.M), out


@pytest.mark.slow
def test_streaming_vs_bulk_bench_prints_the_ratio_and_the_trickle_latency() -> None:
    out = run_bench("streaming_vs_bulk.py", "--cards", "12", "--trickle", "2", "--trickle-every", "2",
                    "--neighbour-s", "4", timeout=900)
    ratio = rf"^ratio streaming/bulk: {NUMBER} from the services' start .*; {NUMBER} from first run start"
    assert re.search(ratio, out, re.M), out
    assert re.search(rf"^rep 1: .*governed concurrency .* of \d+ samples; this bench's own CPU over the drain "
                     rf"{NUMBER} s$", out, re.M), out
    assert re.search(rf"^rep 1: .*first run created {NUMBER} s and started {NUMBER} s after", out, re.M), out
    cpu = (rf"^rep 1 CPU: \d+ bulk workers {NUMBER} s \({NUMBER} s a card; busy [^)]*\); \d+ run workers {NUMBER} s "
           rf"\({NUMBER} s a card; busy [^)]*\); beside the runs: daemon {NUMBER} s, \d+ code server\(s\) {NUMBER} s "
           rf"\({NUMBER} of a core over the drain\)$")
    assert re.search(cpu, out, re.M), out
    assert re.search(rf"^ratio per repetition: {NUMBER} \(median {NUMBER}\)$", out, re.M), out
    assert re.search(rf"^trickle insert -> evidence, 2 cards: p50 {NUMBER} s  max {NUMBER} s", out, re.M), out
    assert re.search(r"^neighbour arm: \d+ cards, cap \d+; \d+ busy process\(es\) for 4 s", out, re.M), out
    assert re.search(r"^neighbour arm: governed concurrency .*; trips opened: \d+ \(expected 0\)", out, re.M), out


HISTORY_SENSORS = ("card_created_sensor", "evidence_changed_sensor", "envelope_trip_sensor")
SMALL_HISTORY = ("--runs", "100,1000", "--reps", "2", "--warmup", "1")


def history_ratio_lines(out: str, label: str) -> None:
    for sensor in HISTORY_SENSORS:
        line = rf"^\[{label}\] ratio {sensor} 1k/100: median {NUMBER}  p90 {NUMBER}"
        assert re.search(line, out, re.M), out
    assert re.search(rf"^\[{label}\] ratio all sensors, one round, 1k/100: median {NUMBER}", out, re.M), out


@pytest.mark.slow
def test_sensor_history_bench_prints_a_ratio_per_sensor_on_sqlite() -> None:
    out = run_bench("sensor_history.py", *SMALL_HISTORY, env=NO_WATCH)
    history_ratio_lines(out, "sqlite")
    assert re.search(r"the instance reads 1,000 runs, 50 failed dispatch runs", out), out


@pytest.mark.slow
@pytest.mark.postgres
def test_sensor_history_bench_prints_a_ratio_per_sensor_on_postgres() -> None:
    out = run_bench("sensor_history.py", *SMALL_HISTORY, "--postgres", env=NO_WATCH)
    history_ratio_lines(out, "postgres")


@pytest.mark.slow
@pytest.mark.postgres
def test_scale_bench_prints_its_ratio_lines() -> None:
    out = run_bench("scale.py", "--smoke", timeout=900, env=NO_WATCH)
    assert re.search(rf"^ratio cards/s per run worker / bulk --workers 1: {NUMBER}   \({NUMBER} vs {NUMBER} cards/s",
                     out, re.M), out
    fixed = rf"^per-run fixed cost: median {NUMBER} s  \(launch {NUMBER}, to first step {NUMBER}"
    assert re.search(fixed, out, re.M), out
    launch = rf"^ratio launch \(RUN_STARTING\) -> first step / bare python -c 'import dagster': {NUMBER}"
    assert re.search(launch, out, re.M), out
    assert re.search(rf"^ratio sensor round, 1k runs \+ 1k partitions / 100 runs \+ 100 partitions: median {NUMBER}",
                     out, re.M), out
    assert re.search(rf"^ratio partitions after retention / batches finished within \d+ days: {NUMBER}", out, re.M), out
    assert re.search(rf"^\[load\] start: {NUMBER} {NUMBER} {NUMBER}", out, re.M), out


@pytest.mark.slow
def test_photo_like_bench_prints_a_row_per_condition() -> None:
    printed = json.loads(run_bench("photo_like.py", "--per-condition", "1", "--json", timeout=600))
    rows, outcomes = printed["conditions"], printed["outcomes"]
    assert list(outcomes) == list(CONDITIONS)
    for name, counts in outcomes.items():  # every card got a join-key pass, and nothing else was counted
        assert sum(n for k, n in counts.items() if k.startswith("join-key:")) == 1, (name, counts)
    assert [r["condition"] for r in rows] == [*CONDITIONS, "total"]
    total = rows[-1]
    assert total["cards"] == len(CONDITIONS) == sum(r["cards"] for r in rows[:-1])
    for key in ("number_right", "set_right", "votes", "wrong_votes"):
        assert total[key] == sum(r[key] for r in rows[:-1]), key
    old = next(r for r in rows if r["condition"] == "format-old")
    assert old["number_printed"] == 0  # an old frame prints no collector number
    assert total["number_right"] > 0 and total["votes"] > 0


@pytest.mark.slow
def test_stage_c_bench_pools_its_repetitions_and_prints_the_targets_as_ratios() -> None:
    """Two photo-like cards, each arm twice (alternating): a line per repetition, the pooled figures of both
    readers, and the targets both in seconds and as ratios to the reader before, measured in the same run."""
    out = run_bench("stage_c.py", "--cards", "2", "--no-real", "--reps", "2", "--json", timeout=900)
    reps = re.findall(rf"^\[photo-like\] repetition (\d): median CPU per card new ({NUMBER}) s, today ({NUMBER}) s$",
                      out, re.M)
    assert [r[0] for r in reps] == ["1", "2"], out
    assert re.search(rf"^\[photo-like\] ratio new / today: CPU per card median ({NUMBER}), p90 ({NUMBER});", out, re.M), out
    ratios = re.search(rf"^targets as ratios to today's reader in this run: median per photo-like card / today's "
                       rf"<= 0\.45 x: (?:met|NOT met) \(({NUMBER}) x\)$", out, re.M)
    assert ratios, out
    figures = json.loads(out.strip().splitlines()[-1])["photo-like"]
    assert float(ratios.group(1)) == pytest.approx(figures["median_s"] / figures["today_median_s"], abs=1e-3)
    # Pooled per card (with two runs, the mean of its two readings), then over the two cards (again a mean):
    # the pooled median is the mean of the two repetitions' medians, not either run's alone.
    for arm, column in (("median_s", 1), ("today_median_s", 2)):
        assert figures[arm] == pytest.approx(sum(float(r[column]) for r in reps) / 2, abs=1e-3), (arm, reps, figures)
