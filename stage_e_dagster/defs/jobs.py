"""``stage_e_dispatch``: both assets of one micro-batch in one run, on the in-process executor.

The default multiprocess executor spends about two seconds per step starting a process; one
batch's two steps share a process here.
"""

from __future__ import annotations

from dagster import AssetSelection, define_asset_job, in_process_executor

stage_e_dispatch = define_asset_job(
    name="stage_e_dispatch",
    selection=AssetSelection.assets("stage_c_evidence", "stage_d_verdicts"),
    executor_def=in_process_executor,
    description="One micro-batch through Stage C then Stage D.",
)
