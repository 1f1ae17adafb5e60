"""Pure evidence computation for one image: run the requested extractors, or build a terminal record.

Nothing here touches the database, so it can run in any process; ``persist`` writes the result.
"""

from __future__ import annotations

import hashlib
import logging
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Iterable

from ..catalog.printed_keys import PrintedKeys
from .decode import DEFAULT_MAX_PIXELS, decode_image
from .extractors import FIELDS_BY_KEY, IMAGE_EXTRACTORS, ORIENTATION_FREE, ImageContext
from .manifest import MANIFEST_VERSIONS
from .text_model import TextModelUnavailable

log = logging.getLogger(__name__)


@dataclass
class ExtractionResult:
    """What one pass produced for (card, content hash): only the keys it ran, each with its version.

    ``skip_reasons`` holds a named reason per skipped key and None for a key that ran cleanly, so
    merging it into a stored row clears an older reason.
    """

    content_hash: str
    fields: dict[str, Any] = field(default_factory=dict)
    extractor_versions: dict[str, str] = field(default_factory=dict)
    skip_reasons: dict[str, str | None] = field(default_factory=dict)
    terminal: bool = False
    error_class: str | None = None
    timings_ms: dict[str, float] = field(default_factory=dict)
    ocr_passes: int = 0  # reads of the upload this pass made: 1 (the two ends) or 2 (closer too)
    extractor_errors: dict[str, str] = field(default_factory=dict)  # key -> traceback of an extractor that raised

    def record(self, key: str, fields: dict[str, Any], skip: str | None) -> None:
        for name in FIELDS_BY_KEY[key]:
            self.fields[name] = fields.get(name)
        self.extractor_versions[key] = MANIFEST_VERSIONS[key]
        self.skip_reasons[key] = skip


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def locator_key(locator: str) -> str:
    """A stable stand-in content hash for an image that could not be read and has no known hash."""
    return "locator:" + hashlib.sha256(locator.encode("utf-8")).hexdigest()[:32]


def fetch_health_fields(*, ok: bool, error_class: str | None, latency_ms: float | None,
                        data: bytes | None, image_format: str | None) -> dict[str, Any]:
    return {
        "fetch_ok": ok,
        "fetch_error_class": error_class,
        "fetch_latency_ms": round(latency_ms, 3) if latency_ms is not None else None,
        "image_format": image_format,
        "byte_size": len(data) if data is not None else None,
        "md5": hashlib.md5(data).hexdigest() if data is not None else None,
        "sha256": sha256_hex(data) if data is not None else None,
    }


def terminal_result(content_hash: str, error_class: str, *, latency_ms: float | None = None,
                    data: bytes | None = None, image_format: str | None = None,
                    keys: Iterable[str] | None = None) -> ExtractionResult:
    """A record for an image that could not be fetched or decoded.

    Every key (all of the manifest unless ``keys`` narrows it to the stale ones, so that values
    already stored are kept) carries its current version and the named reason, so the card is
    not re-fetched until its image changes.
    """
    result = ExtractionResult(content_hash=content_hash, terminal=True, error_class=error_class)
    wanted = set(MANIFEST_VERSIONS if keys is None else keys)
    for key in (k for k in MANIFEST_VERSIONS if k in wanted):
        if key == "fetch_health":
            result.record(key, fetch_health_fields(ok=False, error_class=error_class, latency_ms=latency_ms,
                                                   data=data, image_format=image_format), error_class)
        elif key == "quality_signals":
            result.record(key, {"is_truncated": error_class == "truncated-image"}, error_class)
        else:
            result.record(key, {}, error_class)
    return result


def compute_evidence(content_hash: str, data: bytes, *, latency_ms: float | None,
                     keys: Iterable[str] | None = None, lexicon: frozenset[str] | None = None,
                     max_pixels: int = DEFAULT_MAX_PIXELS, printed: PrintedKeys | None = None,
                     ocr_pass: str = "full") -> ExtractionResult:
    """Decode ``data`` and run the requested manifest keys (all when None). ``printed`` (the
    catalogue's collector keys) tells the reader when a read is confirmed and needs no closer look;
    ``ocr_pass`` "cheap" reads far less (``settings.ocr_pass``).

    An undecodable image gives a terminal record. An extractor that raises records the skip
    ``extractor-error`` at its version rather than leaving the card to loop, and its traceback in
    ``extractor_errors`` for the caller to count and log.
    """
    wanted = list(MANIFEST_VERSIONS) if keys is None else [k for k in MANIFEST_VERSIONS if k in set(keys)]
    started = time.perf_counter()
    decoded = decode_image(data, max_pixels=max_pixels)
    decode_ms = (time.perf_counter() - started) * 1000
    if decoded.image is None:
        assert decoded.error is not None
        result = terminal_result(content_hash, decoded.error, latency_ms=latency_ms, data=data,
                                 image_format=decoded.image_format)
        result.timings_ms["decode"] = decode_ms
        return result
    result = ExtractionResult(content_hash=content_hash)
    result.timings_ms["decode"] = decode_ms
    ctx = ImageContext.from_upload(decoded.image, lexicon, orient_by_text=not set(wanted) <= ORIENTATION_FREE,
                                   keys=printed, cheap=ocr_pass == "cheap",
                                   upload_size=(decoded.width, decoded.height) if decoded.width else None)
    result.timings_ms["localise"] = (time.perf_counter() - started) * 1000 - decode_ms
    for key in wanted:
        if key == "fetch_health":
            result.record(key, fetch_health_fields(ok=True, error_class=None, latency_ms=latency_ms, data=data,
                                                   image_format=decoded.image_format), None)
            continue
        t0 = time.perf_counter()
        try:
            fields, skip = IMAGE_EXTRACTORS[key](ctx)
        except TextModelUnavailable:  # the host cannot read at all: fail the batch, leave no card done
            raise
        except Exception:  # an extractor bug must not stall the card in the backlog
            log.exception("extractor %s failed on content %s", key, content_hash)
            result.extractor_errors[key] = traceback.format_exc()  # the caller puts it in the run's log
            fields, skip = {}, "extractor-error"
        result.timings_ms[key] = (time.perf_counter() - t0) * 1000
        result.record(key, fields, skip)
    result.ocr_passes = ctx.ocr_passes
    return result
