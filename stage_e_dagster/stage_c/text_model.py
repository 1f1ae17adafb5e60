"""The scene-text model Stage C reads with: PP-OCR detection, direction and recognition, in process.

PaddleOCR's PP-OCR models run on ONNX Runtime through ``rapidocr``'s pre- and post-processing. The
model files come inside rapidocr's PyPI wheel (``DET_FILE`` and the others), so nothing is fetched at
run time. The sessions are built once per process, on first use, with one intra-op and one inter-op
thread: parallelism comes from one worker per core, and ONNX Runtime's own pool spent twice the CPU for
the same output. Nothing here is imported when the code location loads; OpenCV, ONNX Runtime and
rapidocr load with the first read. Direction takes every crop of a look in one call; recognition
reads each crop alone, the first look's at the crop's own width.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from importlib.util import find_spec
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from .huge_pages import HUGE_PAGES_ON, started_with_huge_pages


class TextModelUnavailable(RuntimeError):
    """The OCR model cannot be loaded: a problem of the host's installation, not of a card."""


# One thread each: the worker is the unit of parallelism (a worker per core).
SESSION_THREADS = 1
# glibc's malloc raises its mmap threshold after every large free (up to 32 MiB), so the detector's and
# recogniser's buffers of a few MiB to tens of MiB come from the heap afterwards and fragment it: a run
# worker's resident memory climbed from about 400 to 600 MB over 40 photo-like cards. Buffers from this
# size up are mapped and returned to the system when freed (a few % more CPU).
MMAP_THRESHOLD_BYTES = 4 << 20
_M_MMAP_THRESHOLD = -3  # mallopt's parameter number in glibc's <malloc.h>

# The model files, each (the package whose wheel ships it, the file inside it). Pinned with rapidocr in
# pyproject.toml: another release ships other weights, and stored evidence would read differently.
# PP-OCRv6 small detection and recognition: against PP-OCRv5 and PP-OCRv4 mobile (bench/README.md,
# "Choosing the models") they read the most, for about the same CPU per crop.
DET_FILE = ("rapidocr", "models/PP-OCRv6_det_small.onnx")
REC_FILE = ("rapidocr", "models/PP-OCRv6_rec_small.onnx")
CLS_FILE = ("rapidocr", "models/ch_ppocr_mobile_v2.0_cls_mobile.onnx")
# Recognition reads each crop alone (in one batch the recogniser pads each crop to the batch's widest,
# which cost CPU and changed what it read; batching saved nothing: four crops of 320 px, 121 ms in one
# call, 124 ms one by one). rapidocr pads every crop to the model's 320 px input (MODEL_WIDTH), and the
# recogniser's cost grows with the width: the first look gives a crop only its own width (at least
# REC_MIN_WIDTH); the closer look, the careful one, pads as the model was trained (a blurred "268/364 M"
# read "208 364 M" at its own 208 px, right at 288 px and more). bench/README.md has the figures.
MODEL_WIDTH = 320
REC_MIN_WIDTH = 64


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


@dataclass(frozen=True)
class _Models:
    det: Any
    det_pre: Any  # the detector's preprocessing: rapidocr makes it anew each call, about 2 ms of reading settings
    cls: Any
    rec: Any


_LOCK = threading.Lock()
_MODELS: _Models | None = None
_ERROR: str | None = None
_LIBC: Any = None  # the C library, once the models are built (see _return_freed_memory)


def model_file(package: str, relative: str) -> Path:
    """A file shipped inside an installed package's wheel (no import of the package itself)."""
    spec = find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"the package {package!r} that ships the OCR model is not installed")
    path = Path(next(iter(spec.submodule_search_locations))) / relative
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing from the installed {package!r}")
    return path


def _config() -> Any:
    """rapidocr's configuration with our files and one thread per session."""
    from rapidocr.main import DEFAULT_CFG_PATH
    from rapidocr.utils.parse_parameters import ParseParams

    params: dict[str, Any] = {
        "EngineConfig.onnxruntime.intra_op_num_threads": SESSION_THREADS,
        "EngineConfig.onnxruntime.inter_op_num_threads": SESSION_THREADS,
        # ONNX Runtime's CPU arena keeps every buffer it grew to: with it a worker peaked at 530-650 MB
        # for at most a few % less CPU per card (bench/README.md).
        "EngineConfig.onnxruntime.enable_cpu_mem_arena": False,
        "Global.log_level": "error",
        # Detection sees the copy it is given as it is: the reader chooses the scale.
        "Det.limit_type": "max",
        "Det.limit_side_len": 4096,
        "Det.model_path": str(model_file(*DET_FILE)),
        "Cls.model_path": str(model_file(*CLS_FILE)),
        "Rec.model_path": str(model_file(*REC_FILE)),
    }
    cfg = ParseParams.update_batch(ParseParams.load(DEFAULT_CFG_PATH), params)
    for task in (cfg.Det, cfg.Cls, cfg.Rec):
        task.engine_cfg = cfg.EngineConfig.onnxruntime
        task.model_root_dir = None
    cfg.Rec.font_path = None
    return cfg


def models() -> _Models:
    """This process's detector, direction classifier and recogniser, built on first use, once."""
    global _MODELS, _ERROR, _LIBC
    if _MODELS is not None:
        return _MODELS
    with _LOCK:
        if _MODELS is None:
            if _ERROR is not None:
                raise TextModelUnavailable(_ERROR)
            _LIBC = _libc()
            _fixed_mmap_threshold(_LIBC)
            try:
                from rapidocr.ch_ppocr_cls import TextClassifier
                from rapidocr.ch_ppocr_det import TextDetector
                from rapidocr.ch_ppocr_rec import TextRecognizer

                # rapidocr's logger writes to standard output: keep its chatter out of run logs and --json.
                logging.getLogger("RapidOCR").setLevel(logging.ERROR)
                cfg = _config()
                det = TextDetector(cfg.Det)
                built = _Models(det, det.get_preprocess(), TextClassifier(cfg.Cls), TextRecognizer(cfg.Rec))
            except Exception as exc:  # an import or model-file problem: the host cannot read at all
                _ERROR = f"the PP-OCR model could not be loaded: {type(exc).__name__}: {exc}"
                raise TextModelUnavailable(_ERROR) from exc
            _MODELS = built
            if started_with_huge_pages() is False:
                logging.getLogger(__name__).warning(
                    "this process started without GLIBC_TUNABLES=%s: the reader's model calls cost about a "
                    "tenth more CPU (docs/operations.md, 'Huge pages for the reader')", HUGE_PAGES_ON)
    return _MODELS


def _detector_input(pre: Any, bgr: np.ndarray) -> np.ndarray | None:
    """The detector's input tensor, as rapidocr's own preprocessing makes it, in float32.

    rapidocr normalises ``(x / 255 - mean) / std`` with float64 mean and std, so NumPy computes the whole
    image in float64 and casts back: 10 ms of a 640 px card copy. With its mean and std of 0.5 the float32
    steps below round once, where float64 was exact, so they give the same tensor bit for bit
    (``tests/stage_c/test_text_model.py``) in a quarter of the CPU. Any other mean or std: rapidocr's own."""
    if not (np.all(pre.mean == 0.5) and np.all(pre.std == 0.5)):
        return pre(bgr)
    resized = pre.resize(bgr)
    if resized is None:
        return None
    tensor = resized.astype(np.float32)
    tensor *= pre.scale
    tensor -= np.float32(0.5)
    tensor /= np.float32(0.5)
    return np.ascontiguousarray(tensor.transpose(2, 0, 1))[np.newaxis]


def detect(bgr: np.ndarray) -> np.ndarray:
    """Text-line boxes (N x 4 x 2 float32, clockwise from the line's top left) found in ``bgr``: rapidocr's
    detector step by step (its ``__call__`` with ``_detector_input`` for its preprocessing)."""
    det = models().det
    _return_freed_memory()
    tensor = _detector_input(models().det_pre, bgr)
    if tensor is None:
        return np.zeros((0, 4, 2), dtype=np.float32)
    boxes, _ = det.postprocess_op(det.session(tensor), bgr.shape[:2])
    if len(boxes) == 0:
        return np.zeros((0, 4, 2), dtype=np.float32)
    return np.asarray(det.sorted_boxes(boxes), dtype=np.float32)


def upside_down(crops: Sequence[np.ndarray]) -> list[tuple[bool, float]]:
    """Per line crop (already horizontal), whether it reads upside down, with the classifier's score."""
    crops = [c for c in crops if c.shape[0] >= 2 and c.shape[1] >= 2]
    if not crops:
        return []
    out = models().cls(list(crops))
    return [(str(label) == "180", float(score)) for label, score in out.cls_res]


def _input(rec: Any, crop: np.ndarray, min_width: int) -> tuple[np.ndarray, float]:
    """The recogniser's input for one crop: scaled to the model's height and padded to at least
    ``min_width`` (a wider crop keeps its own width, as rapidocr gives it)."""
    _, height, _ = rec.rec_image_shape
    ratio = crop.shape[1] / crop.shape[0]
    return rec.resize_norm_img(crop, max(ratio, min_width / height))[np.newaxis, :].astype(np.float32), ratio


def recognise(crops: Sequence[np.ndarray], *, padded: bool = False) -> list[Recognised]:
    """The text of each line crop (horizontal, upright), in order, each read alone: at its own width, or
    ``padded`` to the model's input width as rapidocr pads it."""
    found = [Recognised("", 0.0)] * len(crops)
    rec = models().rec
    for i, crop in enumerate(crops):
        if crop.shape[0] < 4 or crop.shape[1] < 4:
            continue
        tensor, ratio = _input(rec, crop, MODEL_WIDTH if padded else REC_MIN_WIDTH)
        (text, score), *_ = rec.postprocess_op(rec.session(tensor), False, wh_ratio_list=[ratio],
                                               max_wh_ratio=tensor.shape[3] / tensor.shape[2])[0]
        found[i] = Recognised(str(text), float(score))
    return found
