"""Links into the Dagster UI's launchpad with a run config already in its editor, and the ack job's config.

The UI opens ``/locations/<location>/jobs/<job>/playground/setup?config=<YAML>`` by copying the
``config`` query parameter into a new launchpad tab and redirecting to the launchpad (the route
``LaunchpadSetupRoot`` of dagster-webserver 1.13). The link is relative to the webserver, so it
works on whatever host and port serve the UI.
"""

from __future__ import annotations

from typing import Any, Mapping
from urllib.parse import quote, urlencode

import yaml

# The code location's name in workspace.yaml, [tool.dg.project] and the shipped dg.toml.
CODE_LOCATION = "stage_e_dagster"
ACK_JOB = "acknowledge_trip"
ACK_OP = "acknowledge_trip_op"
# What the ack job's launchpad shows before anyone has pasted a trip id: no trip has this id, and an
# empty note is refused, so launched unchanged it acknowledges nothing.
EXAMPLE_TRIP_ID = "envtrip-PASTE-THE-OPEN-TRIP-ID"
EXAMPLE_NOTE = ""


def ack_run_config(trip_id: str, note: str | None = None) -> dict[str, Any]:
    """The ack job's run config; without a note the launchpad marks it missing until a person writes one."""
    config: dict[str, str] = {"trip_id": trip_id}
    if note is not None:
        config["note"] = note
    return {"ops": {ACK_OP: {"config": config}}}


def launchpad_path(job: str, run_config: Mapping[str, Any]) -> str:
    """The UI path that opens ``job``'s launchpad with ``run_config`` (as YAML) in the editor."""
    text = yaml.safe_dump(dict(run_config), sort_keys=False)
    query = urlencode({"config": text}, quote_via=quote)
    return f"/locations/{quote(CODE_LOCATION, safe='')}/jobs/{quote(job, safe='')}/playground/setup?{query}"


def ack_launchpad_path(trip_id: str) -> str:
    """The acknowledge job's launchpad with ``trip_id`` filled in; the note is left for the person."""
    return launchpad_path(ACK_JOB, ack_run_config(trip_id))
