"""Stage C: fetch each image once and extract its evidence. Knows nothing of Dagster or batches.

Entry points: ``run.run_stage_c`` (cards or the whole backlog), ``pool.run_stage_c_pool`` (BULK
with worker processes), ``fetch.ImageFetcher`` / ``fetch.FetchLockout``, ``compute.compute_evidence``
and ``persist.persist_evidence``, ``rollout.rollout_step`` (a new manifest re-queues stale cards),
``backlog.mark_image_changed``, ``current`` (the one definition of current evidence) and ``hashing.art_phash``.
"""
