from pathlib import Path

import pytest

from stage_e_dagster.settings import SettingsError, load_settings, usable_cpus


def test_defaults_ship_streaming_off_with_the_documented_values(tmp_path: Path) -> None:
    s = load_settings({"STAGE_E_STATE_DIR": str(tmp_path)})
    assert s.streaming_enabled is False
    assert s.micro_batch_size is None  # batches sized by work
    assert s.batch_target_s == 200.0
    assert s.arrival_wait_s == 3.5  # an idle card_created tick watches for new cards this long
    assert s.max_concurrent_dispatches == max(1, int(usable_cpus()))  # one dispatch run per usable CPU
    assert s.cpu_pressure_ceiling == 75.0 and s.cpu_pressure_soft_bar == 25.0
    assert s.rss_mb_ceiling == 768
    assert s.fetch_failure_rate_ceiling == 0.01
    assert s.fetch_failure_window == 500
    assert s.host_load_ceiling == usable_cpus() and s.host_load_soft_bar == 0.75 * usable_cpus()
    assert s.database_url == f"sqlite:///{tmp_path / 'catalog.sqlite'}"
    assert s.dagster_home == tmp_path / "dagster_home"


def test_values_are_parsed_and_typed() -> None:
    s = load_settings(
        {
            "STAGE_E_STREAMING_ENABLED": "true",
            "STAGE_E_MICRO_BATCH_SIZE": "40",
            "STAGE_E_BATCH_TARGET_S": "12.5",
            "STAGE_E_ARRIVAL_WAIT_S": "0",
            "STAGE_E_HOST_LOAD_CEILING": "7.5",
            "STAGE_E_CPU_PRESSURE_CEILING": "45",
            "STAGE_E_CPU_PRESSURE_FILE": "/sys/fs/cgroup/pod/cpu.pressure",
            "STAGE_E_FETCH_ALLOWED_HOSTS": "img.example.org, CDN.example.org",
            "STAGE_E_DATABASE_URL": "postgresql+psycopg2://u@h/db",
        }
    )
    assert s.streaming_enabled is True
    assert s.micro_batch_size == 40
    assert s.batch_target_s == 12.5
    assert s.arrival_wait_s == 0.0
    assert s.host_load_ceiling == 7.5
    assert s.cpu_pressure_ceiling == 45.0 and s.cpu_pressure_soft_bar == 15.0
    assert s.cpu_pressure_file == Path("/sys/fs/cgroup/pod/cpu.pressure")
    assert s.fetch_allowed_hosts == ("img.example.org", "cdn.example.org")
    assert s.database_url == "postgresql+psycopg2://u@h/db"


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("STAGE_E_MICRO_BATCH_SIZE", "abc", "STAGE_E_MICRO_BATCH_SIZE='abc' is not a whole number"),
        ("STAGE_E_MICRO_BATCH_SIZE", "0", "STAGE_E_MICRO_BATCH_SIZE='0' must be at least 1"),
        ("STAGE_E_BATCH_TARGET_S", "0.5", "STAGE_E_BATCH_TARGET_S='0.5' must be at least 1"),
        ("STAGE_E_ARRIVAL_WAIT_S", "5", "STAGE_E_ARRIVAL_WAIT_S='5' must be at most 4"),
        ("STAGE_E_ARRIVAL_WAIT_S", "-1", "STAGE_E_ARRIVAL_WAIT_S='-1' must be at least 0"),
        ("STAGE_E_RSS_MB_CEILING", "-5", "STAGE_E_RSS_MB_CEILING='-5' must be at least 0"),
        ("STAGE_E_HOST_LOAD_CEILING", "-0.1", "STAGE_E_HOST_LOAD_CEILING='-0.1' must be at least 0"),
        ("STAGE_E_FETCH_FAILURE_RATE_CEILING", "1.5", "must be at most 1"),
        ("STAGE_E_FETCH_FAILURE_WINDOW", "2.5", "is not a whole number"),
        ("STAGE_E_HOST_LOAD_CEILING", "nan", "is not a number"),
        ("STAGE_E_HOST_LOAD_CEILING", "inf", "STAGE_E_HOST_LOAD_CEILING='inf' is not a number"),
        ("STAGE_E_FETCH_MAX_BYTES", "10", "STAGE_E_FETCH_MAX_BYTES='10' must be at least 1024"),
        ("STAGE_E_CPU_PRESSURE_CEILING", "101", "STAGE_E_CPU_PRESSURE_CEILING='101' must be at most 100"),
        ("STAGE_E_CPU_PRESSURE_SOFT", "80", "STAGE_E_CPU_PRESSURE_SOFT=80 must not be above"),
        ("STAGE_E_STREAMING_ENABLED", "maybe", "STAGE_E_STREAMING_ENABLED='maybe' is not a boolean"),
    ],
)
def test_a_bad_value_fails_with_one_line_naming_the_variable(name: str, value: str, message: str) -> None:
    with pytest.raises(SettingsError) as info:
        load_settings({name: value})
    text = str(info.value)
    assert message in text
    assert name in text
    assert "\n" not in text


def test_the_process_environment_is_read_and_blank_values_count_as_unset(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STAGE_E_STATE_DIR", str(tmp_path))
    monkeypatch.setenv("STAGE_E_STREAMING_ENABLED", " yes ")
    monkeypatch.setenv("STAGE_E_MICRO_BATCH_SIZE", "   ")
    monkeypatch.setenv("STAGE_E_DATABASE_URL", "")
    s = load_settings()
    assert s.streaming_enabled is True and s.micro_batch_size is None
    assert s.database_url == f"sqlite:///{tmp_path / 'catalog.sqlite'}"
    assert s.image_roots == (tmp_path / "images",)
