"""Micro-batch keys: short, sortable, deterministic, and safe as Dagster partition keys and run keys."""

from __future__ import annotations

import hashlib
import re
from datetime import datetime
from typing import Sequence

_KEY = re.compile(r"^mb-\d{8}T\d{6}-[0-9a-f]{8}(-r\d+)?$")


def new_batch_key(created_at: datetime, card_ids: Sequence[int]) -> str:
    """``mb-<UTC second>-<8 hex>``; the hex digests the exact creation time and the card ids, so the
    same cards batched again (after an abandoned batch) get a new key."""
    material = created_at.isoformat() + ":" + ",".join(str(i) for i in sorted(card_ids))
    digest = hashlib.sha1(material.encode()).hexdigest()[:8]
    return f"mb-{created_at:%Y%m%dT%H%M%S}-{digest}"


def retry_key(root_key: str, attempt: int) -> str:
    """A retry's key: a sensor run key is never reusable, even after a failed run."""
    return f"{root_key.split('-r')[0]}-r{attempt}"


def run_key(batch_key: str, request_count: int) -> str:
    """The run key of a batch's ``request_count``-th request: a run key is never reusable, even after a
    failed run, so a batch requested again carries the number of that request."""
    return batch_key if request_count <= 1 else f"{batch_key}@{request_count}"


def is_batch_key(key: str) -> bool:
    return bool(_KEY.match(key))
