"""Why a run failed, in one line a person can act on.

Dagster records a user's exception under its own wrapper (``DagsterExecutionStepExecutionError:
Error occurred while executing op ...``), and a run worker that vanished (SIGKILL, OOM kill, an
unexpected exit) only as "marked as failed from outside the execution context", with the exit
code in a separate engine event. The ledger and the retry logic need the user's exception, or a
plain statement that the worker died, so this module reads the run's event log and says that.
"""

from __future__ import annotations

import re
import signal
from typing import Any, Protocol

from dagster import DagsterEventType, DagsterInstance

from .dagster_internals import RunEvent, run_events

WORKER_DIED = "run worker died (signal or OOM)"
MAX_REASON_CHARS = 500

# The RUN_FAILURE message ``DagsterInstance.report_run_failed`` writes when given none: the code
# server's orphaned-run check, launch and dequeue failures (the detail is in an engine event).
_MARKED_FAILED_OUTSIDE = "This run has been marked as failed from outside the execution context."
# JobFailureData.failure_reason values that mean the worker process stopped under the run.
_DEATH_FAILURE_REASONS = {"UNEXPECTED_TERMINATION", "RUN_WORKER_RESTART"}
# Engine-event text Dagster writes when it finds a run or step process gone, with its exit code.
_CRASH_EXPLANATION = re.compile(
    r"(?:Run execution process for \S+|Multiprocess executor: child process for step \S+)"
    r" (?:was terminated by signal \d+ \(\w+\)|unexpectedly exited with code -?\d+)"
)
_LAUNCH_CRASH = re.compile(r"Subprocess for \S+ terminated unexpectedly with exit code (-?\d+)")
# RUN_FAILURE message of the run-monitoring daemon, for launchers that check worker health.
_MONITOR_DETECTED = "Detected run worker status"
# The class of the exception Dagster's multiprocess executor raises for a step process that died.
CHILD_PROCESS_CRASH = "ChildProcessCrashException"
# How many of a run's latest engine events are read to find the crash explanation.
_ENGINE_EVENTS_READ = 25


class _ErrorInfo(Protocol):
    """The fields of Dagster's serialised error this module reads."""

    message: str
    cls_name: str | None
    cause: Any
    context: Any


def failure_reason_of(instance: DagsterInstance, run_id: str) -> str:
    """Why run ``run_id`` failed: a dead worker, the user's exception, a ``Failure``'s description,
    else Dagster's run failure message, else a plain statement. At most ``MAX_REASON_CHARS`` long.

    A worker that died (killed by a signal, OOM-killed, exited unexpectedly) gives a reason starting
    with ``WORKER_DIED`` followed by Dagster's detail (exit code or signal when known). A step that
    raised gives ``"<ExceptionClass>: <first line of its message>"`` for the user's exception
    (Dagster's wrappers skipped); when that exception was raised ``from`` another, the root cause is
    appended as ``" (caused by <Class>: <message>)"``.
    """
    run_failure = _latest_event(instance, run_id, DagsterEventType.RUN_FAILURE)
    died = _worker_death(instance, run_id, run_failure)
    if died is not None:
        return _bounded(f"{WORKER_DIED}: {died}")

    step_failure = _first_event(instance, run_id, DagsterEventType.STEP_FAILURE)
    interrupted: str | None = None
    if step_failure is not None:
        description = step_failure.user_failure_description
        if description and description.strip():
            return _bounded(description.strip())
        if step_failure.error is not None:
            if _qualified_name(step_failure.error).endswith(CHILD_PROCESS_CRASH):
                crash = _crash_in_engine_events(instance, run_id)
                return _bounded(f"{WORKER_DIED}: {crash or 'step process crashed'}")
            summary = error_summary(step_failure.error)
            if step_failure.error_source != "INTERRUPT":
                return _bounded(summary)
            interrupted = summary  # the run-level message says who interrupted it

    if run_failure is not None:
        error = run_failure.error
        if error is not None and run_failure.failure_reason != "STEP_FAILURE":
            return _bounded(error_summary(error))  # the run itself raised (job initialisation, executor)
        message = run_failure.message.strip()
        if message == _MARKED_FAILED_OUTSIDE:
            detail = _engine_error_message(instance, run_id)
            return _bounded(f"{message} {detail}" if detail else message)
        if message:
            return _bounded(message)
    if interrupted is not None:
        return _bounded(interrupted)
    canceled = _latest_event(instance, run_id, DagsterEventType.RUN_CANCELED)
    if canceled is not None:
        message = canceled.message.strip()
        return _bounded(f"run canceled: {message}" if message else "run canceled")
    return "run ended without a recorded failure event"


def may_be_a_live_worker(instance: DagsterInstance, run_id: str) -> bool:
    """Whether the run's failure report is about a process, not the work, and does not prove that the
    worker running the work died.

    With two daemons one run can be launched twice: the second worker exits at once (code 0, or
    Dagster fails the run as a worker restart) and the run is reported failed while the first worker
    goes on. A signal or a non-zero exit of the run's process, or an error the run raised, is proof;
    these reports are not, so the caller looks for the worker's own progress before believing them.
    """
    run_failure = _latest_event(instance, run_id, DagsterEventType.RUN_FAILURE)
    if run_failure is None:
        return False
    message = run_failure.message.strip()
    if run_failure.failure_reason == "RUN_WORKER_RESTART" or message.startswith(_MONITOR_DETECTED):
        return True
    if message != _MARKED_FAILED_OUTSIDE:
        return False
    crash = _crash_in_engine_events(instance, run_id)
    return crash is None or crash.endswith("exited with code 0.")


def error_summary(error: _ErrorInfo) -> str:
    """``"<Class>: <first line>"`` of the user's exception in a Dagster error chain.

    Dagster's own wrappers (classes from the ``dagster`` package with a cause) are stepped through
    to their cause, or to the exception they were raised while handling. From the first exception
    that is not such a wrapper, a ``from`` cause chain adds its root as ``(caused by ...)``.
    """
    current = error
    while _is_dagster_wrapper(current):
        current = current.cause if current.cause is not None else current.context
    summary = _one_line(current)
    root = current
    while root.cause is not None:
        root = root.cause
    if root is not current:
        summary = f"{summary} (caused by {_one_line(root)})"
    return summary


def _worker_death(instance: DagsterInstance, run_id: str, run_failure: RunEvent | None) -> str | None:
    """Dagster's account of the run worker dying, or None when the run failed some other way."""
    if run_failure is None:
        return None
    message = run_failure.message.strip()
    reason = run_failure.failure_reason
    # The failure reason Dagster recorded decides first; its message text only where it recorded none.
    if reason in _DEATH_FAILURE_REASONS:
        if reason == "RUN_WORKER_RESTART":
            detail = _latest_engine_message(instance, run_id)
            return detail or "the run worker was restarted while the run was in progress"
        return message or "execution was interrupted unexpectedly"
    if message.startswith(_MONITOR_DETECTED):
        return message.splitlines()[0]
    if message == _MARKED_FAILED_OUTSIDE:
        return _crash_in_engine_events(instance, run_id)
    return None


def _crash_in_engine_events(instance: DagsterInstance, run_id: str) -> str | None:
    """The newest engine event saying a run or step process died, reduced to its exit code or signal."""
    for event in _engine_events(instance, run_id):
        text = event.message
        match = _CRASH_EXPLANATION.search(text)
        if match:
            return match.group(0) + "."
        launch = _LAUNCH_CRASH.search(text)
        if launch:
            return f"{launch.group(0)}{_signal_suffix(int(launch.group(1)))} while starting."
    return None


def _engine_error_message(instance: DagsterInstance, run_id: str) -> str | None:
    """First line of the newest engine event that carries an error (why Dagster failed the run)."""
    for event in _engine_events(instance, run_id):
        if event.error is not None and event.message:
            return event.message.strip().splitlines()[0]
    return None


def _latest_engine_message(instance: DagsterInstance, run_id: str) -> str | None:
    for event in _engine_events(instance, run_id):
        if event.message and event.message.strip():
            return event.message.strip().splitlines()[0]
    return None


def _engine_events(instance: DagsterInstance, run_id: str) -> list[RunEvent]:
    """The run's newest engine events, newest first."""
    return run_events(instance, run_id, DagsterEventType.ENGINE_EVENT, limit=_ENGINE_EVENTS_READ, newest_first=True)


def _first_event(instance: DagsterInstance, run_id: str, event_type: DagsterEventType) -> RunEvent | None:
    events = run_events(instance, run_id, event_type, limit=1)
    return events[0] if events else None


def _latest_event(instance: DagsterInstance, run_id: str, event_type: DagsterEventType) -> RunEvent | None:
    events = run_events(instance, run_id, event_type, limit=1, newest_first=True)
    return events[0] if events else None


def _qualified_name(error: _ErrorInfo) -> str:
    """The exception's dotted class name as Python printed it (``pkg.mod.Class``; builtins bare)."""
    name = error.cls_name or ""
    heads = [line.strip().split(": ", 1)[0] for line in (error.message or "").splitlines() if line.strip()]
    for head in heads:
        if name and (head == name or head.endswith("." + name)):
            return head
    return name or (heads[0] if heads else "")


def _is_dagster_wrapper(error: _ErrorInfo) -> bool:
    return _qualified_name(error).startswith("dagster.") and (error.cause is not None or error.context is not None)


def _one_line(error: _ErrorInfo) -> str:
    """``"<Class>: <message's first line>"``, without the module path Python prints before the class."""
    lines = [line.strip() for line in (error.message or "").splitlines() if line.strip()]
    qualified = _qualified_name(error)
    name = error.cls_name or qualified.rsplit(".", 1)[-1] or "Exception"
    # Python prints the class on the first line, except after a SyntaxError's source excerpt.
    first = next((line for line in lines if line == qualified or line.startswith(qualified + ": ")), "")
    first = first or (lines[0] if lines else "")
    if first.startswith(qualified + ": "):
        body = first[len(qualified) + 2 :].strip()
    elif first == qualified:
        body = ""
    else:
        body = first
    return f"{name}: {body}" if body else name


def _signal_suffix(exit_code: int) -> str:
    if exit_code < 0:
        try:
            return f" ({signal.Signals(-exit_code).name})"
        except ValueError:
            return ""
    return ""


def _bounded(text: str) -> str:
    text = " ".join(text.split()) if "\n" in text else text.strip()
    return text if len(text) <= MAX_REASON_CHARS else text[: MAX_REASON_CHARS - 1].rstrip() + "…"
