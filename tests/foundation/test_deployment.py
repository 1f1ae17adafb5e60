"""The deployment files the project owns keep its invariants: read as YAML, no cluster and no image needed.

What is checked is what the pipeline's safety rests on once it runs as separate services: one dispatch
pool and its limit, no run-tag limit standing in for it, run monitoring with a max runtime, secrets only
by reference, and a worker RSS bar that trips before the run pod's memory limit is reached.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any, Iterator

import pytest
import yaml
from dagster import DagsterInstance
from dagster._core.instance.config import dagster_instance_config

from stage_e_dagster.defs.assets import stage_c_evidence, stage_d_verdicts
from stage_e_dagster.defs.dagster_internals import BACKFILL_WAITS_FOR_ITS_LOCATION
from stage_e_dagster.defs.tags import DISPATCH_POOL, PARTITION_TAG
from stage_e_dagster.settings import Settings
from stage_e_dagster.stage_c.huge_pages import HUGE_PAGES_ON, TUNABLES_VARIABLE, with_huge_pages

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
VALUES = DEPLOY / "helm" / "values.yaml"
INSTANCE_YAMLS = [ROOT / "dagster.yaml", DEPLOY / "dagster.postgres.yaml"]

# The share of the run pod's memory limit the worker's own RSS bar may take: the rest is for the
# page cache and any other process in the pod, which the kernel counts against the same limit but
# the bar does not see (OCR runs in the worker, so the model's memory is inside the bar).
RSS_BAR_SHARE_OF_LIMIT = 0.75

_MEMORY_BYTES = {"Ki": 1024, "Mi": 1024**2, "Gi": 1024**3, "K": 10**3, "M": 10**6, "G": 10**9, "": 1}


def mebibytes(quantity: str) -> float:
    """A Kubernetes memory quantity (``1Gi``, ``768Mi``, ``1G``, bytes) in MiB."""
    match = re.fullmatch(r"(\d+(?:\.\d+)?)(Ki|Mi|Gi|K|M|G|)", str(quantity).strip())
    assert match, f"not a memory quantity: {quantity!r}"
    return float(match.group(1)) * _MEMORY_BYTES[match.group(2)] / 1024**2


def load(path: Path) -> dict[str, Any]:
    return yaml.safe_load(path.read_text())


@pytest.fixture(scope="module")
def values() -> dict[str, Any]:
    return load(VALUES)


def user_deployment(values: dict[str, Any]) -> dict[str, Any]:
    [deployment] = values["dagster-user-deployments"]["deployments"]
    return deployment


def walk(node: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    """Every (dotted path, leaf value) of a YAML document."""
    if isinstance(node, dict):
        for key, child in node.items():
            yield from walk(child, f"{path}.{key}" if path else str(key))
    elif isinstance(node, list):
        for index, child in enumerate(node):
            yield from walk(child, f"{path}[{index}]")
    else:
        yield path, node


def test_mebibytes_reads_kubernetes_quantities() -> None:
    assert mebibytes("1Gi") == 1024 and mebibytes("768Mi") == 768 and mebibytes("524288Ki") == 512
    assert round(mebibytes("1G"), 1) == 953.7 and mebibytes(str(2 * 1024**2)) == 2


@pytest.mark.parametrize("path", INSTANCE_YAMLS, ids=lambda p: p.name)
def test_instance_yaml_has_one_run_granular_pool_and_run_monitoring(path: Path) -> None:
    config = load(path)
    pools = config["concurrency"]["pools"]
    assert pools["granularity"] == "run"  # a SIGKILLed run gives its slot back
    # The limit before the first dispatch tick; from then on the sensors keep the pool at the
    # governed concurrency, at most STAGE_E_MAX_CONCURRENT_DISPATCHES (the usable CPUs by default).
    assert pools["default_limit"] == 2
    runs = config["concurrency"]["runs"]
    # A finite run-queue cap under the pool (a pass that finds the pool's row missing ignores the pool):
    # the shipped dispatch cap plus the acknowledge job's room (tests/foundation/test_scaling_defaults.py).
    assert runs["max_concurrent_runs"] == pools["default_limit"] + 1
    # The cap on dispatch runs that holds on a pass ignoring the pool (its limit row deleted): every run of
    # a micro_batches partition carries dagster/partition, asset-backfill runs too (they carry no job tags).
    assert runs["tag_concurrency_limits"] == [{"key": PARTITION_TAG, "limit": pools["default_limit"]}]
    # Dagster refuses run_queue or run_coordinator caps beside `concurrency`.
    for conflicting in ("max_concurrent_runs", "tag_concurrency_limits"):
        assert conflicting not in (config.get("run_queue") or {})
        assert conflicting not in ((config.get("run_coordinator") or {}).get("config") or {})
    monitoring = config["run_monitoring"]
    assert monitoring["enabled"] is True
    assert 0 < monitoring["max_runtime_seconds"] <= 2 * Settings().run_max_runtime_s
    assert monitoring["start_timeout_seconds"] > 0


def test_postgres_instance_reads_its_url_from_the_environment() -> None:
    storage = load(DEPLOY / "dagster.postgres.yaml")["storage"]["postgres"]
    assert storage["postgres_url"] == {"env": "DAGSTER_PG_URL"}


def test_values_cap_dispatch_with_the_one_pool(values: dict[str, Any]) -> None:
    concurrency = values["concurrency"]
    assert concurrency["enabled"] is True
    assert concurrency["pools"] == {"granularity": "run", "defaultLimit": 2}
    env = user_deployment(values)["env"]
    assert int(env["STAGE_E_MAX_CONCURRENT_DISPATCHES"]) == concurrency["pools"]["defaultLimit"]
    # The whole dispatch cap plus the acknowledge job run at once, and no more: the run queue's own cap.
    assert concurrency["runs"]["maxConcurrentRuns"] == int(env["STAGE_E_MAX_CONCURRENT_DISPATCHES"]) + 1
    assert concurrency["runs"]["tagConcurrencyLimits"] == [
        {"key": PARTITION_TAG, "limit": int(env["STAGE_E_MAX_CONCURRENT_DISPATCHES"])}]
    # The pool the values limit is the one both assets declare.
    assert {stage_c_evidence.op.pool, stage_d_verdicts.op.pool} == {DISPATCH_POOL}


def chart_run_queue(values: dict[str, Any]) -> dict[str, Any]:
    """The run coordinator config the chart writes into the instance: its custom type renders it as given."""
    coordinator = values["dagsterDaemon"]["runCoordinator"]
    assert coordinator["enabled"] is True and coordinator["type"] == "CustomRunCoordinator"
    custom = coordinator["config"]["customRunCoordinator"]
    assert (custom["module"], custom["class"]) == ("dagster._core.run_coordinator", "QueuedRunCoordinator")
    return custom["config"]


def test_values_queue_runs_without_a_competing_cap(values: dict[str, Any]) -> None:
    queued = chart_run_queue(values)
    assert "max_concurrent_runs" not in queued and "tag_concurrency_limits" not in queued


def test_values_dequeue_as_the_instance_yaml_does_and_dagster_accepts_what_the_chart_renders(
    values: dict[str, Any], tmp_path: Path
) -> None:
    """The chart writes the run queue's config as given (and no run cap, with `concurrency` on)."""
    rendered = chart_run_queue(values)
    assert rendered == load(DEPLOY / "dagster.postgres.yaml")["run_queue"]
    concurrency = values["concurrency"]
    instance_yaml = {
        "run_coordinator": {
            "module": "dagster._core.run_coordinator",
            "class": "QueuedRunCoordinator",
            "config": rendered,
        },
        "concurrency": {
            "runs": {"max_concurrent_runs": concurrency["runs"]["maxConcurrentRuns"],
                     "tag_concurrency_limits": concurrency["runs"]["tagConcurrencyLimits"]},
            "pools": {
                "granularity": concurrency["pools"]["granularity"],
                "default_limit": concurrency["pools"]["defaultLimit"],
            },
        },
    }
    (tmp_path / "dagster.yaml").write_text(yaml.safe_dump(instance_yaml))
    config, _ = dagster_instance_config(str(tmp_path))
    assert config["run_coordinator"]["config"] == rendered
    with DagsterInstance.from_config(str(tmp_path)) as instance:
        assert instance.run_coordinator.dequeue_use_threads and instance.run_coordinator.dequeue_num_workers == 4
        queue = instance.get_concurrency_config().run_queue_config
        assert (queue.max_user_code_failure_retries, queue.user_code_failure_retry_delay) == (
            rendered["max_user_code_failure_retries"], rendered["user_code_failure_retry_delay"])
        assert queue.tag_concurrency_limits == concurrency["runs"]["tagConcurrencyLimits"]


# A code server the daemon starts itself is replaced at the daemon's next workspace refresh (every 60 s)
# after it died, then needs its start-up; a rollout of a separate one can take longer: a run's launch is
# tried for three minutes at least.
CODE_SERVER_OUTAGE_S = 60 + 60 + 60


@pytest.mark.parametrize("path", [*INSTANCE_YAMLS, ROOT / "stage_e_dagster" / "instance_files" / "dagster.yaml"],
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_every_instance_file_retries_a_launch_through_a_code_server_restart(path: Path, tmp_path: Path) -> None:
    """Issue 40 item 1: at Dagster's default (no retry) or the earlier 6 tries 10 s apart, a run dequeued
    while the code server restarted was failed, and its sweep's backfill ended COMPLETED_FAILED."""
    shutil.copyfile(path, tmp_path / "dagster.yaml")
    config, _ = dagster_instance_config(str(tmp_path))
    queue = config["run_queue"]
    assert queue["user_code_failure_retry_delay"] > 0
    assert queue["max_user_code_failure_retries"] * queue["user_code_failure_retry_delay"] >= CODE_SERVER_OUTAGE_S


def test_every_daemon_the_project_deploys_keeps_a_backfill_through_an_unloadable_location(
    values: dict[str, Any],
) -> None:
    """The chart's daemon and any daemon run from the image get the variable Dagster's backfill daemon reads
    before it fails a backfill whose location is down (the processes this project starts itself get it
    from ``daemon_environment``: tests/orchestration/test_code_server_restart.py)."""
    [(name, value)] = BACKFILL_WAITS_FOR_ITS_LOCATION.items()
    assert values["dagsterDaemon"]["env"][name] == value
    assert f"{name}={value}" in " ".join(_final_stage((DEPLOY / "Dockerfile").read_text()))


def test_run_pods_and_the_image_start_with_huge_pages_for_the_reader(values: dict[str, Any]) -> None:
    """glibc reads its tunables as a process starts: the run pods get them through the user deployment's
    env (included in launched runs), and every process of the image from its ENV."""
    assert with_huge_pages({}) == {TUNABLES_VARIABLE: HUGE_PAGES_ON}
    assert user_deployment(values)["env"][TUNABLES_VARIABLE] == HUGE_PAGES_ON
    assert f"{TUNABLES_VARIABLE}={HUGE_PAGES_ON}" in " ".join(_final_stage((DEPLOY / "Dockerfile").read_text()))


def test_values_monitor_runs_and_bound_their_runtime(values: dict[str, Any]) -> None:
    monitoring = values["dagsterDaemon"]["runMonitoring"]
    assert monitoring["enabled"] is True and monitoring["startTimeoutSeconds"] > 0
    max_runtime = int(user_deployment(values)["env"]["STAGE_E_RUN_MAX_RUNTIME_S"])
    assert monitoring["maxRuntimeSeconds"] == max_runtime


def test_values_launch_each_run_in_its_own_pod_with_requests_and_limits(values: dict[str, Any]) -> None:
    launcher = values["runLauncher"]
    assert launcher["type"] == "K8sRunLauncher"
    resources = launcher["config"]["k8sRunLauncher"]["resources"]
    for kind in ("requests", "limits"):
        assert {"cpu", "memory"} <= set(resources[kind])
    assert mebibytes(resources["requests"]["memory"]) <= mebibytes(resources["limits"]["memory"])


def test_the_rss_bar_sits_below_every_memory_limit_a_worker_runs_under(values: dict[str, Any]) -> None:
    deployment = user_deployment(values)
    # The bar reaches run pods only through the code location's config.
    assert deployment["includeConfigInLaunchedRuns"]["enabled"] is True
    bar_mib = float(deployment["env"]["STAGE_E_RSS_MB_CEILING"])
    run_limit = mebibytes(values["runLauncher"]["config"]["k8sRunLauncher"]["resources"]["limits"]["memory"])
    code_server_limit = mebibytes(deployment["resources"]["limits"]["memory"])
    for limit in (run_limit, code_server_limit):
        assert bar_mib <= RSS_BAR_SHARE_OF_LIMIT * limit, (bar_mib, limit)


def test_host_load_ceiling_is_left_to_the_sampling_pods_cpus(values: dict[str, Any]) -> None:
    # The sensors sample load in the code-server pod, scaled to its cgroup CPUs; the default ceiling
    # is that same count, so a fixed value here could only disagree with it.
    assert "STAGE_E_HOST_LOAD_CEILING" not in user_deployment(values)["env"]
    assert "cpu" in user_deployment(values)["resources"]["limits"]


def test_secrets_come_from_kubernetes_secrets_only(values: dict[str, Any]) -> None:
    deployment = user_deployment(values)
    assert "STAGE_E_DATABASE_URL" not in deployment["env"]
    assert {"name": "stage-e-catalogue"} in deployment["envSecrets"]
    assert {"name": "stage-e-catalogue"} in values["runLauncher"]["config"]["k8sRunLauncher"]["envSecrets"]
    assert values["generatePostgresqlPasswordSecret"] is False
    assert values["global"]["postgresqlSecretName"]
    assert values["postgresql"]["postgresqlPassword"] == ""
    job = load(DEPLOY / "k8s" / "catalogue-migrate-job.yaml")
    [container] = job["spec"]["template"]["spec"]["containers"]
    [url] = [e for e in container["env"] if e["name"] == "STAGE_E_DATABASE_URL"]
    assert url == {"name": "STAGE_E_DATABASE_URL",
                   "valueFrom": {"secretKeyRef": {"name": "stage-e-catalogue", "key": "STAGE_E_DATABASE_URL"}}}


_URL_WITH_PASSWORD = re.compile(r"[a-z][a-z0-9+.-]*://[^/\s:@]+:(?P<password>[^@\s/]+)@", re.IGNORECASE)
_SECRET_KEY = re.compile(r"pass(word)?|secret|token", re.IGNORECASE)


def _is_reference(password: str) -> bool:
    """An environment reference (``${PW}``, ``$(PW)``) or a placeholder a reader fills in (``password``, ``***``)."""
    return bool(re.fullmatch(r"\$\{?[A-Z_][A-Z0-9_]*\}?|\$\([A-Z_][A-Z0-9_]*\)|password|<[^>]*>|\*+", password,
                             re.IGNORECASE))


def literal_passwords(text: str, parsed: Any | None) -> list[str]:
    """Passwords written out in a file: in a URL's user-info, or as the value of a password-like key."""
    found = [m.group("password") for m in _URL_WITH_PASSWORD.finditer(text) if not _is_reference(m.group("password"))]
    if parsed is not None:
        for path, leaf in walk(parsed):
            key = path.rsplit(".", 1)[-1]
            if _SECRET_KEY.search(key) and isinstance(leaf, str) and leaf and not key.endswith("SecretName"):
                found.append(f"{path}={leaf}")
    return found


def test_the_leak_finder_finds_literal_passwords() -> None:
    assert literal_passwords("url: postgresql+psycopg2://u:hunter2@db:5432/x", None) == ["hunter2"]
    written = {"postgresql": {"postgresqlPassword": "test"}}
    assert literal_passwords("x", written) == ["postgresql.postgresqlPassword=test"]
    assert literal_passwords('URL="postgresql+psycopg2://u:${PW}@h:5432/x"', None) == []
    assert literal_passwords("# DAGSTER_PG_URL=postgresql+psycopg2://user:password@host:5432/dagster", None) == []
    assert literal_passwords("x", {"global": {"postgresqlSecretName": "s"}, "p": {"password": {"env": "V"}}}) == []


def test_no_file_under_deploy_holds_a_literal_password() -> None:
    files = [p for p in sorted(DEPLOY.rglob("*")) if p.is_file()]
    assert VALUES in files and DEPLOY / "Dockerfile" in files
    for path in files:
        text = path.read_text()
        parsed = yaml.safe_load(text) if path.suffix in (".yaml", ".yml") else None
        assert literal_passwords(text, parsed) == [], path


def _final_stage(dockerfile: str) -> list[str]:
    lines = [line.strip() for line in dockerfile.replace("\\\n", " ").splitlines()]
    instructions = [line for line in lines if line and not line.startswith("#")]
    starts = [i for i, line in enumerate(instructions) if line.upper().startswith("FROM ")]
    assert len(starts) >= 2, "a wheel-building stage and a final stage"
    return instructions[starts[-1]:]


def test_the_image_installs_the_wheel_and_no_source() -> None:
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    final = _final_stage(dockerfile)
    assert re.match(r"FROM python:3\.11-slim-(bookworm|trixie)\b", final[0]), final[0]
    text = "\n".join(final)
    assert "tesseract" not in text.lower(), "the OCR model comes inside a wheel; no system OCR"
    assert re.search(r"pip install .*--no-index .*--find-links /wheels stage-e-dagster", text)
    assert not [line for line in final if re.match(r"(COPY|ADD)\s+(--\S+\s+)*\.\s", line)], "source copied in"
    assert not [line for line in final if line.startswith(("COPY", "ADD")) and "from=" not in line]
    assert any(re.fullmatch(r"USER (?!0\b|root\b)\S+", line) for line in final), "runs as a non-root user"
    assert "stage_e_dagster.definitions" in final[-1] and "code-server" in final[-1]
    assert "pip wheel" in dockerfile[: dockerfile.rindex("\nFROM ")], "the wheels are built in an earlier stage"


def test_the_chart_serves_the_same_code_location_the_image_does(values: dict[str, Any]) -> None:
    deployment = user_deployment(values)
    args = deployment["dagsterApiGrpcArgs"]
    assert args[args.index("--module-name") + 1] == "stage_e_dagster.definitions"
    assert str(deployment["port"]) in (DEPLOY / "Dockerfile").read_text()
    assert deployment["securityContext"]["runAsNonRoot"] is True


def test_sensors_tick_in_the_daemons_sensor_thread_in_every_instance_file_and_the_chart(
    values: dict[str, Any], tmp_path: Path
) -> None:
    """Dagster 1.13.27's daemon closes its workspace at a stop before it shuts a sensor thread pool down, so a
    tick in the pool then fails with a traceback; the sensor thread itself is joined before the close
    (``tests/orchestration/test_service_cycles.py`` stops the daemon mid-tick with these settings)."""
    rendered = {"use_threads": values["dagsterDaemon"]["sensors"]["useThreads"]}
    assert rendered == {"use_threads": False}
    for path in INSTANCE_YAMLS:
        assert load(path)["sensors"] == rendered, path
    (tmp_path / "dagster.yaml").write_text(yaml.safe_dump({"sensors": rendered}))
    with DagsterInstance.from_config(str(tmp_path)) as instance:
        assert instance.get_sensor_settings() == rendered


def test_the_first_install_creates_the_instance_storage_with_no_other_dagster_process_running() -> None:
    """``storage-first.yaml`` runs the chart's instance-migrate Job alone: processes started together on an
    empty instance database can each create its tables and stamp Alembic's revision twice."""
    first = load(DEPLOY / "helm" / "storage-first.yaml")
    assert first["migrate"] == {"enabled": True}
    assert first["dagsterWebserver"] == {"replicaCount": 0}
    assert first["dagsterDaemon"] == {"enabled": False}
    assert first["dagster-user-deployments"] == {"enabled": False}
    guide = (ROOT / "docs" / "deployment.md").read_text()
    assert guide.index("-f deploy/helm/storage-first.yaml") < guide.index(
        "helm upgrade --install stage-e dagster/dagster -n stage-e -f deploy/helm/values.yaml\n"
    )
