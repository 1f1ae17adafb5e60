"""The governor's rule on its own: additive increase below the soft bar, hold between, halve above the
hard bar, and a trip only at the floor, sustained."""

from __future__ import annotations

from datetime import timedelta

from stage_e_dagster.catalog.base import utcnow
from stage_e_dagster.envelope.governor import Bars, govern

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
