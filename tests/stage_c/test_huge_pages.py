"""The huge-page tunable reaches the processes that read cards, and glibc acts on it (issue 39)."""

from __future__ import annotations

import multiprocessing
import os
import platform
import subprocess
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pytest

from stage_e_dagster.stage_c.huge_pages import (
    HUGE_PAGES_ON,
    TUNABLES_VARIABLE,
    for_child_processes,
    started_with_huge_pages,
    with_huge_pages,
)

THP_MODE = Path("/sys/kernel/mm/transparent_hugepage/enabled")
LIBC, LIBC_VERSION = platform.libc_ver()
HUGE_PAGES_HONOURED = (THP_MODE.exists() and "[never]" not in THP_MODE.read_text() and LIBC == "glibc"
                       and tuple(map(int, LIBC_VERSION.split("."))) >= (2, 35))

# A child that maps and touches 64 MiB through malloc, then says how much of its memory is huge pages.
TOUCH_64_MIB = r"""
import ctypes
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
size = 64 << 20
ctypes.memset(libc.malloc(size), 1, size)
print(next(int(line.split()[1]) for line in open("/proc/self/smaps_rollup") if line.startswith("AnonHugePages:")))
"""


def test_the_tunable_joins_those_already_set_and_an_operators_own_setting_wins() -> None:
    assert with_huge_pages({"PATH": "/bin"}) == {"PATH": "/bin", TUNABLES_VARIABLE: HUGE_PAGES_ON}
    merged = with_huge_pages({TUNABLES_VARIABLE: "glibc.malloc.arena_max=2"})
    assert merged[TUNABLES_VARIABLE] == f"glibc.malloc.arena_max=2:{HUGE_PAGES_ON}"
    assert with_huge_pages(merged) == merged  # given twice, it is there once
    off = {TUNABLES_VARIABLE: "glibc.malloc.hugetlb=0"}
    assert with_huge_pages(off) == off


def test_what_a_process_started_with_is_read_from_its_start_environment(tmp_path: Path) -> None:
    environ = tmp_path / "environ"
    environ.write_bytes(b"PATH=/bin\0GLIBC_TUNABLES=glibc.malloc.arena_max=2:glibc.malloc.hugetlb=1\0")
    assert started_with_huge_pages(environ) is True
    environ.write_bytes(b"PATH=/bin\0GLIBC_TUNABLES=glibc.malloc.hugetlb=0\0")
    assert started_with_huge_pages(environ) is False
    environ.write_bytes(b"PATH=/bin\0")
    assert started_with_huge_pages(environ) is False
    assert started_with_huge_pages(tmp_path / "missing") is None


def _child_started_with_huge_pages() -> bool | None:
    return started_with_huge_pages()


@pytest.mark.skipif(platform.system() != "Linux", reason="reads /proc/self/environ")
def test_a_spawned_pools_workers_start_with_the_tunable_and_the_parent_is_left_as_it_was(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """As the bulk pool starts its workers (``stage_c.pool``): spawned while the block is open."""
    monkeypatch.delenv(TUNABLES_VARIABLE, raising=False)
    spawn = multiprocessing.get_context("spawn")
    with for_child_processes(), ProcessPoolExecutor(max_workers=1, mp_context=spawn) as pool:
        assert pool.submit(_child_started_with_huge_pages).result(timeout=120) is True
    assert TUNABLES_VARIABLE not in os.environ
    with ProcessPoolExecutor(max_workers=1, mp_context=spawn) as pool:
        assert pool.submit(_child_started_with_huge_pages).result(timeout=120) is False


def _huge_kib(env: dict[str, str]) -> int:
    done = subprocess.run([sys.executable, "-S", "-c", TOUCH_64_MIB], env=env, capture_output=True, text=True,
                          timeout=120, check=True)
    return int(done.stdout)


@pytest.mark.skipif(not HUGE_PAGES_HONOURED, reason="needs glibc 2.35 or newer and transparent huge pages")
def test_glibc_maps_a_large_buffer_in_huge_pages_only_with_the_tunable() -> None:
    plain = {k: v for k, v in os.environ.items() if k != TUNABLES_VARIABLE}
    assert _huge_kib(with_huge_pages(plain)) >= 2048
    if "[madvise]" in THP_MODE.read_text():  # with [always] the kernel gives them anyway
        assert _huge_kib(plain) == 0
