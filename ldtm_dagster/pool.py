"""The `gpu` concurrency pool: its limit follows free VRAM (SPEC §6), set on the Dagster instance.

Every GPU-bound step (training, backtests, inference) declares `pool="gpu"`, and each such step is
ONE process on one device: training fans out into one step per ticker chunk (`assets/checkpoints.py`),
so a run holds a slot per training process and the instance enforces the limit across runs. The
limit is written to the instance's event log storage, which every executor re-reads; it is set by
`gpu_pool_sensor` and, before its training steps start, by every retrain run itself.
"""

from __future__ import annotations

from dagster import AssetExecutionContext, DagsterInstance

from ldtm_core.learning.gpu_slots import SlotPlan

GPU_POOL = "gpu"
# Tag on runs that hold GPU steps, so they can be found and filtered (and capped in dagster.yaml).
GPU_RUN_TAGS = {"ldtm/gpu": "true"}


def pool_limit(instance: DagsterInstance) -> int | None:
    """The limit the instance currently enforces for `gpu` (None when it enforces none)."""
    return instance.event_log_storage.get_concurrency_info(GPU_POOL).limit


def sync_pool_limit(instance: DagsterInstance, plan: SlotPlan) -> tuple[int | None, int]:
    """Set the `gpu` pool to the plan's slot count; returns (previous, new). Writes only on change."""
    info = instance.event_log_storage.get_concurrency_info(GPU_POOL)
    if info.using_default_limit or info.limit is None or info.slot_count != plan.total:
        instance.event_log_storage.set_concurrency_slots(GPU_POOL, plan.total)
    return info.limit, plan.total


def step_workers(context: AssetExecutionContext, plan: SlotPlan, cap: int | None = None) -> int:
    """CPU threads one single-process GPU step may use: the pool slots nobody else holds, within the plan.

    Only for steps that stay one process (backtests): more threads never start another GPU process.
    Training does not use this; it takes one pool slot per process instead.
    """
    workers = plan.total
    info = context.instance.event_log_storage.get_concurrency_info(GPU_POOL)
    if info.limit is not None:
        own = any(s.run_id == context.run_id for s in info.claimed_slots)
        workers = min(workers, info.limit - len(info.claimed_slots) + (1 if own else 0))
    if cap is not None:
        workers = min(workers, cap)
    return max(1, workers)
