"""The code location: assembles the assets, job, sensors and resources. Nothing here runs at import."""

from __future__ import annotations

from dagster import Definitions, in_process_executor

from .defs.ack_job import acknowledge_trip_job
from .defs.assets import stage_c_evidence, stage_d_verdicts
from .defs.checks import no_open_trip
from .defs.envelope_asset import stage_e_envelope
from .defs.jobs import stage_e_dispatch
from .defs.resources import LOCATION_RESOURCE
from .defs.sensors.backstop_sweep import backstop_sweep_sensor
from .defs.sensors.card_created import card_created_sensor
from .defs.sensors.envelope_trip import envelope_trip_sensor
from .defs.sensors.evidence_changed import evidence_changed_sensor
from .defs.sensors.retention import retention_sensor

defs = Definitions(
    assets=[stage_c_evidence, stage_d_verdicts, stage_e_envelope],
    asset_checks=[no_open_trip],
    jobs=[stage_e_dispatch, acknowledge_trip_job],
    sensors=[
        card_created_sensor,
        evidence_changed_sensor,
        envelope_trip_sensor,
        backstop_sweep_sensor,
        retention_sensor,
    ],
    resources={"stage_e": LOCATION_RESOURCE},
    # The code location's default: a sweep's backfill runs (the implicit asset job) run in one process,
    # as dispatch runs do, instead of starting a subprocess per step.
    executor=in_process_executor,
)
