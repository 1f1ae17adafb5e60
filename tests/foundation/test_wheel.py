"""The package installed as a user would (a wheel in a fresh venv, run outside the checkout) has what its commands need.

The fresh venv gets only the project's wheel; its dependencies are borrowed from the checkout's
venv through a ``.pth`` path line, which adds that folder to ``sys.path`` without running its
``.pth`` files, so the checkout's editable install of ``stage_e_dagster`` stays out of reach.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from stage_e_dagster.instance_files import INSTANCE_YAML, WORKSPACE_YAML, read_instance_file

PROJECT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name", [INSTANCE_YAML, WORKSPACE_YAML])
def test_the_checkout_files_for_dagster_dev_are_the_shipped_ones(name: str) -> None:
    """One source of truth: the top-level copy `dg dev -w workspace.yaml` reads in a checkout is the package's file."""
    assert (PROJECT / name).read_text(encoding="utf-8") == read_instance_file(name)


def _build_wheel(tmp_path: Path) -> Path:
    """Build from a copy of the sources, so the build leaves nothing (build/, egg-info) in the checkout."""
    source = tmp_path / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(PROJECT / name, source / name)
    shutil.copytree(PROJECT / "stage_e_dagster", source / "stage_e_dagster",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    wheels = tmp_path / "wheels"
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", str(source), "--no-deps", "-q", "-w", str(wheels)],
                           capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stdout + built.stderr
    (wheel,) = wheels.glob("stage_e_dagster-*.whl")
    return wheel


def _fresh_venv(tmp_path: Path, wheel: Path) -> Path:
    venv = tmp_path / "venv"
    base_python = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base_python, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    (site / "checkout-venv-dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    installed = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "-q",
                                str(wheel)], capture_output=True, text=True, timeout=300)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    return venv


@pytest.mark.slow
def test_a_wheel_in_a_fresh_venv_runs_the_demo_from_an_empty_folder(tmp_path: Path) -> None:
    venv = _fresh_venv(tmp_path, _build_wheel(tmp_path))
    folder = tmp_path / "empty"
    folder.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STAGE_E_", "DAGSTER_", "PYTHON"))}

    def run(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(venv / "bin" / args[0]), *args[1:]], cwd=folder, env=env,
                              capture_output=True, text=True, timeout=timeout)

    where = run("python", "-c", "import stage_e_dagster; print(stage_e_dagster.__file__)")
    assert where.returncode == 0, where.stderr
    assert Path(where.stdout.strip()).is_relative_to(venv), where.stdout
    assert not Path(where.stdout.strip()).is_relative_to(PROJECT)

    demo = run("stage-e", "demo", "--headless", "--until-idle", "--cards", "8", "--timeout", "400", timeout=600)
    assert demo.returncode == 0, demo.stdout[-3000:] + demo.stderr[-3000:]
    assert "demo idle after" in demo.stdout and "8 cards" in demo.stdout, demo.stdout
    assert (folder / ".state" / "dagster_home" / INSTANCE_YAML).read_text() == read_instance_file(INSTANCE_YAML)

    status = run("stage-e", "status", "--json")
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)["stage_c_backlog"] == 0
    ledger = run("stage-e", "ledger", "--json")
    assert ledger.returncode == 0, ledger.stderr
    batches = json.loads(ledger.stdout)["batches"]
    assert sum(b["card_count"] for b in batches if b["status"] == "completed") == 8, batches
    listed = run("stage-e", "batches", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    assert {b["batch_key"] for b in json.loads(listed.stdout)} >= {b["batch_key"] for b in batches}

    # The demo wrote a dg project folder (an installed wheel has no pyproject.toml) linked to the installed package.
    dg_folder = folder / ".state" / "dg"
    assert (dg_folder / "stage_e_dagster").resolve().is_relative_to(venv)
    dg_env = {**env, "DAGSTER_HOME": str(folder / ".state" / "dagster_home"),
              "STAGE_E_STATE_DIR": str(folder / ".state")}
    for command in (("check", "defs"), ("list", "defs", "--json")):
        done = subprocess.run([str(venv / "bin" / "python"), "-m", "dagster_dg_cli.cli", *command], cwd=dg_folder,
                              env=dg_env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "stage_e_envelope" in done.stdout
