"""The scene-text model Stage C reads with: PP-OCR detection, direction and recognition, in process.

PaddleOCR's PP-OCR models run on ONNX Runtime through ``rapidocr``, whose wheel carries the ONNX
files, so nothing is fetched at run time. The sessions are built once per process, on first use,
with one intra-op and one inter-op thread: parallelism comes from one worker per core, and ONNX
Runtime's own pool spent twice the CPU for the same output. Nothing here is imported when the
code location loads; OpenCV, ONNX Runtime and rapidocr load with the first read.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

if TYPE_CHECKING:
    from rapidocr import RapidOCR


class TextModelUnavailable(RuntimeError):
    """The OCR model cannot be loaded: a problem of the host's installation, not of a card."""


# One thread each: the worker is the unit of parallelism (a worker per core).
SESSION_THREADS = 1
# glibc's malloc raises its mmap threshold after every large free (up to 32 MiB), so the detector's and
# recogniser's buffers of a few MiB to tens of MiB come from the heap afterwards and fragment it: a run
# worker's resident memory climbed from about 400 to 600 MB over 40 photo-like cards. Buffers from this
# size up are mapped and returned to the system when freed (peak about 450 MB; a few % more CPU).
MMAP_THRESHOLD_BYTES = 4 << 20
_M_MMAP_THRESHOLD = -3  # mallopt's parameter number in glibc's <malloc.h>


def _libc() -> Any:
    """This process's C library, when it is one we can tune (None elsewhere, e.g. musl or macOS)."""
    import ctypes
    import ctypes.util

    name = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(name) if name else None
    except OSError:
        return None


def _fixed_mmap_threshold(libc: Any) -> None:
    """Fix glibc's mmap threshold for this process."""
    if libc is not None and hasattr(libc, "mallopt"):
        libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)


def _return_freed_memory() -> None:
    """Hand the heap's free pages back to the system before a detection takes its buffers.

    The buffers under the mmap threshold that a card's work frees (image copies, line crops, the
    recogniser's tensors) stay in glibc's heap as free pages: a worker rested about 40 MB above what
    it held, and the detector's peak stacked on top of that. ``malloc_trim`` costs about a millisecond."""
    if _LIBC is not None and hasattr(_LIBC, "malloc_trim"):
        _LIBC.malloc_trim(0)


@dataclass(frozen=True)
class Recognised:
    text: str
    score: float  # the recogniser's mean character probability, 0-1


_LOCK = threading.Lock()
_ENGINE: RapidOCR | None = None
_ENGINE_ERROR: str | None = None
_LIBC: Any = None  # the C library, once the engine is built (see _return_freed_memory)


def _params() -> dict[str, Any]:
    return {
        "EngineConfig.onnxruntime.intra_op_num_threads": SESSION_THREADS,
        "EngineConfig.onnxruntime.inter_op_num_threads": SESSION_THREADS,
        "Global.log_level": "error",
        # Detection sees the copy it is given as it is: the reader chooses the scale.
        "Global.use_preprocess_img": False,
        "Det.limit_type": "max",
        "Det.limit_side_len": 4096,
        "Global.text_score": 0.0,
    }


def engine() -> RapidOCR:
    """This process's PP-OCR engine, built on first use (sessions load lazily inside it, once)."""
    global _ENGINE, _ENGINE_ERROR, _LIBC
    if _ENGINE is not None:
        return _ENGINE
    with _LOCK:
        if _ENGINE is None:
            if _ENGINE_ERROR is not None:
                raise TextModelUnavailable(_ENGINE_ERROR)
            _LIBC = _libc()
            _fixed_mmap_threshold(_LIBC)
            try:
                import logging

                from rapidocr import RapidOCR

                built = RapidOCR(params=_params())
                # rapidocr sets its own logger's level; keep its per-call chatter out of run logs.
                logging.getLogger("RapidOCR").setLevel(logging.ERROR)
            except Exception as exc:  # an import or model-file problem: the host cannot read at all
                _ENGINE_ERROR = f"the PP-OCR model could not be loaded: {type(exc).__name__}: {exc}"
                raise TextModelUnavailable(_ENGINE_ERROR) from exc
            _ENGINE = built
    return _ENGINE


def detect(bgr: np.ndarray) -> np.ndarray:
    """Text-line boxes (N x 4 x 2 float32, clockwise from the line's top left) found in ``bgr``."""
    model = engine()
    _return_freed_memory()
    out = model(bgr, use_det=True, use_cls=False, use_rec=False)
    boxes = getattr(out, "boxes", None)
    if boxes is None or len(boxes) == 0:
        return np.zeros((0, 4, 2), dtype=np.float32)
    return np.asarray(boxes, dtype=np.float32)


def upside_down(crops: Sequence[np.ndarray]) -> list[tuple[bool, float]]:
    """Per line crop (already horizontal), whether it reads upside down, with the classifier's score."""
    if not crops:
        return []
    model = engine()
    found: list[tuple[bool, float]] = []
    for crop in crops:
        out = model(crop, use_det=False, use_cls=True, use_rec=False)
        label, score = (out.cls_res[0] if getattr(out, "cls_res", None) else ("0", 0.0))
        found.append((str(label) == "180", float(score)))
    return found


def recognise(crops: Sequence[np.ndarray]) -> list[Recognised]:
    """The text of each line crop (horizontal, upright), in order."""
    model = engine()
    found: list[Recognised] = []
    for crop in crops:
        if crop.shape[0] < 4 or crop.shape[1] < 4:
            found.append(Recognised("", 0.0))
            continue
        out = model(crop, use_det=False, use_cls=False, use_rec=True)
        txts = getattr(out, "txts", None) or ("",)
        scores = getattr(out, "scores", None) or (0.0,)
        found.append(Recognised(str(txts[0]), float(scores[0])))
    return found
