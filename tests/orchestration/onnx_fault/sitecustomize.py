"""A fault injected into every process of a test's daemon, code server and run workers: this folder on
their ``PYTHONPATH`` makes Python import it at start-up. Nothing of the product changes.

While the file named by ``ONNX_FAULT_FLAG`` exists, ONNX Runtime fails as ``ONNX_FAULT_KIND`` says:
``run``, ``InferenceSession.run`` raises (a model that loads and fails on every crop); ``load``, the
``InferenceSession`` constructor raises (a model that cannot load). Deleting the file is the fix.
Every injected failure appends ``<epoch seconds> <pid>`` to ``ONNX_FAULT_LOG``. ONNX Runtime is
patched when something first imports it, so a process that never reads text never loads it.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import os
import sys
import time
from typing import Any

FLAG = os.environ.get("ONNX_FAULT_FLAG", "")
KIND = os.environ.get("ONNX_FAULT_KIND", "run")
LOG = os.environ.get("ONNX_FAULT_LOG", "")
RUN_ERROR = "injected: ONNX Runtime fails on every crop"
LOAD_ERROR = "injected: the model file does not load"


def _failing() -> bool:
    if not (FLAG and os.path.exists(FLAG)):
        return False
    if LOG:
        with open(LOG, "a", encoding="ascii") as log:
            log.write(f"{time.time():.3f} {os.getpid()}\n")
    return True


def _patch(module: Any) -> None:
    session = module.InferenceSession
    if KIND == "run":
        original_run = session.run

        def run(self: Any, *args: Any, **kwargs: Any) -> Any:
            if _failing():
                raise RuntimeError(RUN_ERROR)
            return original_run(self, *args, **kwargs)

        session.run = run
    else:
        original_init = session.__init__

        def init(self: Any, *args: Any, **kwargs: Any) -> None:
            if _failing():
                raise RuntimeError(LOAD_ERROR)
            original_init(self, *args, **kwargs)

        session.__init__ = init


class _PatchOnImport(importlib.abc.MetaPathFinder):
    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name != "onnxruntime":
            return None
        sys.meta_path.remove(self)  # once: the real finders locate it, and it is patched once loaded
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        exec_module = loader.exec_module

        def exec_and_patch(module: Any) -> None:
            exec_module(module)
            _patch(module)

        loader.exec_module = exec_and_patch  # type: ignore[method-assign]
        return spec


if FLAG:
    sys.meta_path.insert(0, _PatchOnImport())
