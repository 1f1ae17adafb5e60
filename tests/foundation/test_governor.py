"""The governor's rule on its own: additive increase below the soft bar, hold between, halve above the
hard bar, and a trip only at the floor, sustained."""

from __future__ import annotations

from datetime import timedelta

from stage_e_dagster.catalog.base import utcnow
from stage_e_dagster.envelope.governor import Bars, govern
from stage_e_dagster.envelope.signals import CPU_PRESSURE, EXCESS_LOAD
from stage_e_dagster.settings import Settings

BARS = Bars(soft=3.0, hard=4.0, cap=8, trip_after_s=120)


def test_the_rule_steers_before_it_trips() -> None:
    now = utcnow()
    assert govern(1.0, BARS, current=None, over_hard_since=None, now=now).limit == 8  # starts at the cap
    assert govern(1.0, BARS, current=3, over_hard_since=None, now=now).limit == 4
    assert govern(1.0, BARS, current=8, over_hard_since=None, now=now).limit == 8
    assert govern(3.5, BARS, current=5, over_hard_since=None, now=now).limit == 5  # between the bars: hold
    assert govern(4.0, BARS, current=5, over_hard_since=None, now=now).limit == 5  # the hard bar is strict
    assert govern(4.1, BARS, current=5, over_hard_since=None, now=now).limit == 2
    floor = govern(9.0, BARS, current=1, over_hard_since=None, now=now)
    assert floor.limit == 1 and floor.over_hard_since == now and not floor.trip
    assert not govern(9.0, BARS, current=1, over_hard_since=now - timedelta(seconds=119), now=now).trip
    assert govern(9.0, BARS, current=1, over_hard_since=now - timedelta(seconds=120), now=now).trip
    # Load falling under the hard bar at the floor resets the sustained period.
    assert govern(3.5, BARS, current=1, over_hard_since=now - timedelta(seconds=100), now=now).over_hard_since is None


def test_a_gap_in_sampling_longer_than_the_trip_period_starts_the_sustained_period_over() -> None:
    now = utcnow()
    long_ago = now - timedelta(seconds=300)
    # Over at the floor since 300 s ago, but the last sample was 200 s ago: nobody watched in between.
    after_gap = govern(9.0, BARS, current=1, over_hard_since=long_ago, now=now, sampled_at=now - timedelta(seconds=200))
    assert after_gap.over_hard_since == now and not after_gap.trip
    # Sampled every few seconds all along: the same reading trips.
    watched = govern(9.0, BARS, current=1, over_hard_since=long_ago, now=now, sampled_at=now - timedelta(seconds=5))
    assert watched.over_hard_since == long_ago and watched.trip


def test_each_signal_has_its_own_bars_and_says_which_it_read() -> None:
    settings = Settings(cpu_pressure_ceiling=60.0, host_load_ceiling=2.0)
    psi = Bars.for_signal(settings, CPU_PRESSURE, cap=4)
    assert (psi.soft, psi.hard, psi.cap) == (20.0, 60.0, 4)
    fallback = Bars.for_signal(settings, EXCESS_LOAD, cap=4)
    assert (fallback.soft, fallback.hard) == (1.5, 2.0)
    now = utcnow()
    assert "cpu pressure 95.00 > hard bar 60" in govern(95.0, psi, current=4, over_hard_since=None, now=now).reason
    # Our own workers filling their CPUs read a few percent: between none and the soft bar, the cap holds.
    assert govern(4.0, psi, current=4, over_hard_since=None, now=now).limit == 4
