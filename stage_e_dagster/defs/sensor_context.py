"""What a sensor tick takes from Dagster: the instance and the ``stage_e`` resource, each built once
per code-server process instead of once per evaluation.

Dagster builds a new ``DagsterInstance`` for every evaluation of a sensor that declares a resource
(it initialises the resources against it), and a tick's own calls on a new instance open its event
log again. On the embedded SQLite instance each of those checks the storages' Alembic revisions by
parsing every migration script: 60-70 ms of a warm tick's 80-100 ms of CPU, three sensors every
five seconds (bench/README.md). Neither thing changes while a code server lives: ``StageEResource``
has no set-up or tear-down and reads its settings when called, and a daemon's instance is fixed by
its reference. So the sensors declare no resource and take both from here.
"""

from __future__ import annotations

import threading

from dagster import DagsterInstance, SensorEvaluationContext, serialize_value

from .dagster_internals import context_instance_ref, instance_from_ref
from .resources import LOCATION_RESOURCE, StageEResource

_lock = threading.Lock()
_by_ref: dict[str, DagsterInstance] = {}


def sensor_instance(context: SensorEvaluationContext) -> DagsterInstance:
    """The process's instance for this context's instance reference; the context's own when it has
    none (a test's ``build_sensor_context(instance=...)``)."""
    ref = context_instance_ref(context)
    if ref is None:
        return context.instance
    key = serialize_value(ref)
    with _lock:
        instance = _by_ref.get(key)
        if instance is None:
            instance = _by_ref[key] = instance_from_ref(ref)
    return instance


def sensor_resource(context: SensorEvaluationContext) -> StageEResource:
    """The ``stage_e`` resource a test's context carries (``build_sensor_context(resources=...)``),
    else the one the code location binds."""
    given = getattr(context.resources, "stage_e", None)
    return given if isinstance(given, StageEResource) else LOCATION_RESOURCE
