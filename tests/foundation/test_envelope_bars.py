"""Every envelope rule at its boundary: strict comparison, priority order, skipped signals."""

import pytest

from stage_e_dagster.envelope.bars import Ceilings, EnvelopeSignals, first_breach

CEILINGS = Ceilings(host_load=7.0, rss_mb=512.0, fetch_failure_rate=0.01, fetch_failure_window=500)


def breach_bar(**signals) -> str | None:
    breach = first_breach(EnvelopeSignals(**signals), CEILINGS)
    return breach.bar if breach else None


def test_healthy_signals_cross_no_bar() -> None:
    assert breach_bar(host_load=1.0, rss_mb=100.0, fetch_failures=0, fetch_total=500, lockout_seen=False) is None


@pytest.mark.parametrize(("load", "bar"), [(7.0, None), (7.0001, "host_load")])
def test_host_load_trips_only_strictly_above_its_ceiling(load: float, bar: str | None) -> None:
    assert breach_bar(host_load=load) == bar


@pytest.mark.parametrize(("rss", "bar"), [(512.0, None), (512.5, "rss")])
def test_rss_trips_only_strictly_above_its_ceiling(rss: float, bar: str | None) -> None:
    assert breach_bar(rss_mb=rss) == bar


@pytest.mark.parametrize(
    ("failures", "total", "bar"),
    [(5, 500, None), (6, 500, "fetch_failure_rate"), (1, 1, None), (0, 0, None), (6, 6, "fetch_failure_rate")],
)
def test_fetch_failure_rate_counts_failures_against_the_whole_window(failures: int, total: int, bar) -> None:
    # 0.01 x 500 = 5 failures allowed: the sixth trips, and one failure in a window of one does not.
    assert breach_bar(fetch_failures=failures, fetch_total=total) == bar


def test_priority_order_lockout_then_load_then_rss_then_failure_rate() -> None:
    everything = dict(host_load=99.0, rss_mb=9999.0, fetch_failures=400, fetch_total=500)
    assert breach_bar(lockout_seen=True, **everything) == "fetch_lockout"
    assert breach_bar(lockout_seen=False, **everything) == "host_load"
    assert breach_bar(host_load=1.0, rss_mb=9999.0, fetch_failures=400, fetch_total=500) == "rss"
    assert breach_bar(host_load=1.0, rss_mb=1.0, fetch_failures=400, fetch_total=500) == "fetch_failure_rate"


def test_missing_signals_skip_their_bars() -> None:
    assert breach_bar() is None
    assert breach_bar(host_load=None, rss_mb=9999.0) == "rss"
    assert breach_bar(host_load=None, rss_mb=None, fetch_failures=6, fetch_total=500) == "fetch_failure_rate"


def test_a_breach_records_observed_value_and_ceiling() -> None:
    signals = EnvelopeSignals(host_load=9.5)
    breach = first_breach(signals, CEILINGS)
    assert breach is not None
    detail = breach.detail(signals)
    assert detail["observed"] == 9.5 and detail["ceiling"] == 7.0
    assert detail["signals"]["host_load"] == 9.5
