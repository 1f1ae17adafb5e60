"""The Dagster run tags the project reads or writes are pinned to Dagster's own names.

Dagster writes ``dagster/partition`` and ``dagster/backfill``, enforces ``dagster/max_runtime`` and
marks automation with the rest; a rename in a Dagster upgrade would silently make the project miss
a run's batch, a backfill's runs or the max runtime. Every ``dagster/...`` string in the package must
be one of these, so a new one is pinned here first.
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path

from dagster._core.storage import dagster_run, tags
from dagster._daemon.monitoring import run_monitoring

from stage_e_dagster.defs import ack_job
from stage_e_dagster.defs import tags as ours

PACKAGE = Path(__file__).resolve().parents[2] / "stage_e_dagster"

# Each Dagster tag name the project uses, with Dagster's own constant for it.
PINNED = {
    "dagster/partition": tags.PARTITION_NAME_TAG,
    "dagster/backfill": tags.BACKFILL_ID_TAG,
    "dagster/max_runtime": tags.MAX_RUNTIME_SECONDS_TAG,
    "dagster/sensor_name": tags.SENSOR_NAME_TAG,
    "dagster/schedule_name": tags.SCHEDULE_NAME_TAG,
    "dagster/parent_backfill_id": tags.PARENT_BACKFILL_ID_TAG,
    "dagster/root_backfill_id": tags.ROOT_BACKFILL_ID_TAG,
    "dagster/from_automation_condition": tags.AUTOMATION_CONDITION_TAG,
    "dagster/auto_materialize": tags.AUTO_MATERIALIZE_TAG,
    "dagster/retry_number": tags.RETRY_NUMBER_TAG,
    "dagster/max_retries": tags.MAX_RETRIES_TAG,
}
# Read by the acknowledge job to name the person; Dagster has no constant for it, only its own reads.
USER_TAG = "dagster/user"
# The older spelling of the max-runtime tag, which Dagster's run monitor still reads (no constant either).
OLD_MAX_RUNTIME_TAG = "dagster/max_runtime_seconds"
UNPINNED = {USER_TAG, OLD_MAX_RUNTIME_TAG}


def test_each_pinned_tag_is_dagsters_own_name() -> None:
    assert {name: name for name in PINNED} == PINNED
    assert f'"{USER_TAG}"' in inspect.getsource(dagster_run)
    assert f'"{OLD_MAX_RUNTIME_TAG}"' in inspect.getsource(run_monitoring)


def test_the_project_tag_constants_are_dagsters() -> None:
    assert ours.PARTITION_TAG == tags.PARTITION_NAME_TAG
    assert ours.BACKFILL_TAG == tags.BACKFILL_ID_TAG
    assert ours.MAX_RUNTIME_TAG == tags.MAX_RUNTIME_SECONDS_TAG
    assert USER_TAG in ack_job.USER_TAGS
    assert set(ack_job.AUTOMATION_TAGS) <= set(PINNED)


def test_every_dagster_tag_in_the_package_is_pinned() -> None:
    used = {
        match.group(1)
        for path in PACKAGE.rglob("*.py")
        for match in re.finditer(r"[\"'](dagster/[a-z_]+)[\"']", path.read_text(encoding="utf-8"))
    }
    assert used, "no dagster/ tag found: the pattern no longer matches how the package writes them"
    assert used <= set(PINNED) | UNPINNED, sorted(used - set(PINNED) - UNPINNED)
