"""Huge pages for the reader's large buffers: glibc's ``hugetlb`` tunable, which a process reads as it starts.

ONNX Runtime's arena is off (it held a worker's memory at its peak), so every model call takes its
buffers afresh, and glibc maps each one of ``text_model.MMAP_THRESHOLD_BYTES`` or more straight from
the kernel, which faults it in 4 KiB at a time: a quarter of the reader's CPU on real photos was
system time. With ``glibc.malloc.hugetlb=1`` glibc asks for transparent huge pages on those maps
(``madvise``), and one fault brings 2 MiB. The readings are the same bit for bit; bench/README.md has
the CPU it saves. glibc reads the tunable once, when the process starts, so it must be in the
environment the card-reading processes start with: the code server's (run workers inherit it), the
bulk pool's workers', the image's. A host whose transparent huge pages are ``never``, or another C
library, ignores it.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Mapping

TUNABLES_VARIABLE = "GLIBC_TUNABLES"
HUGE_PAGES_TUNABLE = "glibc.malloc.hugetlb"
HUGE_PAGES_ON = f"{HUGE_PAGES_TUNABLE}=1"


def _tunables(value: str) -> dict[str, str]:
    """``GLIBC_TUNABLES``'s ``name=value`` pairs (colon-separated), in order."""
    pairs = (item.partition("=") for item in value.split(":") if item)
    return {name: setting for name, _, setting in pairs}


def with_huge_pages(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` with the huge-page tunable added to whatever tunables it already sets. A setting of
    ``glibc.malloc.hugetlb`` already there (an operator's ``=0``) is kept as it is."""
    current = env.get(TUNABLES_VARIABLE, "")
    if HUGE_PAGES_TUNABLE in _tunables(current):
        return dict(env)
    return {**env, TUNABLES_VARIABLE: f"{current}:{HUGE_PAGES_ON}" if current else HUGE_PAGES_ON}


def started_with_huge_pages(environ_file: Path = Path("/proc/self/environ")) -> bool | None:
    """Whether this process started with the tunable on: the environment it started with, which is what
    glibc read (``os.environ`` may have changed since). None where that cannot be read (not Linux)."""
    try:
        raw = environ_file.read_bytes()
    except OSError:
        return None
    for entry in raw.split(b"\0"):
        name, _, value = entry.decode("utf-8", "replace").partition("=")
        if name == TUNABLES_VARIABLE:
            return _tunables(value).get(HUGE_PAGES_TUNABLE) == "1"
    return False


@contextmanager
def for_child_processes() -> Iterator[None]:
    """The tunable in this process's environment while the block runs, so the processes it starts in
    that time (a spawned pool's workers) start with it; the environment as it was afterwards."""
    before = os.environ.get(TUNABLES_VARIABLE)
    os.environ[TUNABLES_VARIABLE] = with_huge_pages(os.environ)[TUNABLES_VARIABLE]
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(TUNABLES_VARIABLE, None)
        else:
            os.environ[TUNABLES_VARIABLE] = before
