"""``micro_batches``: one dynamic partition per micro-batch; its key is the catalogue batch key."""

from __future__ import annotations

from dagster import DynamicPartitionsDefinition

micro_batches = DynamicPartitionsDefinition(name="micro_batches")
