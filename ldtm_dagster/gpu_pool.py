"""The `gpu` concurrency pool: its limit follows free VRAM (SPEC §6), set on the Dagster instance, and
the slots a fanned-out run cuts its chunks by (the chunk steps themselves: chunk_fanout.py).

Every GPU-bound step (training, backtests, inference) declares `pool="gpu"`, and each such step is
ONE process on one device: training and backtests fan out into one step per ticker chunk
(`assets/checkpoints.py`, `assets/backtests.py`), so a run holds a slot per training process and the
instance enforces the limit across runs. The limit is written to the instance's event log storage,
which every executor re-reads; it is set by `gpu_pool_sensor` and, before its chunk steps start, by
every fanned-out run itself.

A chunk step dies with its run: it asks the kernel to kill it when the run worker dies and polls the
run's status, so a failed or canceled run leaves no orphan training behind (`chunk_step_guard`).

The instance's claim is not atomic across processes (two runs claiming at once can run one step over
the limit), so every `gpu` step also holds one of the limit's leases in the app database while it
works (`gpu_slot_lease`, ldtm_core/learning/slot_lease.py): an over-admitted step waits for one.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

from dagster import (
    DagsterInstance,
    Failure,
    OpExecutionContext,
)

from ldtm_core.config import env_text
from ldtm_core.errors import LDTMError
from ldtm_core.learning.gpu_slots import ENV_POOL_ID, SlotPlan
from ldtm_core.learning.slot_lease import slot_lease
from ldtm_core.learning.ticker_pool import worker_devices

from . import deployment

GPU_POOL = "gpu"
# Tag on runs that hold GPU steps, so they can be found and filtered (and capped in dagster.yaml).
GPU_RUN_TAGS = {"ldtm/gpu": "true"}


def mark_pool_processes() -> str:
    """Mark every process started after this call (run workers, step processes, their ticker-pool
    workers) as this instance's `gpu` pool, so the pool's limit counts the VRAM they hold as its own
    (gpu_slots.probe) instead of shrinking under its own load. Called once when the code location loads
    (definitions.py); a value set by the deployment wins. Returns the marker in force."""
    return os.environ.setdefault(ENV_POOL_ID, pool_id())


def pool_id() -> str:
    """This instance's `gpu` pool: the deployment's marker, else the pool named after its DAGSTER_HOME."""
    return env_text(ENV_POOL_ID) or f"{GPU_POOL}@{os.environ.get('DAGSTER_HOME') or os.getcwd()}"


def pool_limit(instance: DagsterInstance) -> int | None:
    """The limit the instance currently enforces for `gpu` (None when it enforces none)."""
    return instance.event_log_storage.get_concurrency_info(GPU_POOL).limit


def sync_pool_limit(instance: DagsterInstance, plan: SlotPlan) -> tuple[int | None, int]:
    """Set the `gpu` pool to the plan's slot count; returns (previous, new). Writes only on change."""
    info = instance.event_log_storage.get_concurrency_info(GPU_POOL)
    if info.using_default_limit or info.limit is None or info.slot_count != plan.total:
        instance.event_log_storage.set_concurrency_slots(GPU_POOL, plan.total)
    return info.limit, plan.total


@contextmanager
def gpu_slot_lease(context: OpExecutionContext, database_url: str) -> Iterator[int | None]:
    """Hold one of the `gpu` limit's leases while a `gpu` step works (nothing to hold without a limit):
    a step the instance admitted over its limit waits here, saying so, until one is free."""
    limit = pool_limit(context.instance)
    if not limit:
        yield None
        return

    def waiting() -> None:
        context.log.warning(
            f"all {limit} gpu slot lease(s) are held: the instance admitted this step over its limit; "
            "waiting for a lease"
        )

    with slot_lease(database_url, pool_id(), limit, on_wait=waiting) as slot:
        yield slot


def chunk_slot_plan(context: OpExecutionContext, gpu) -> SlotPlan:
    """The plan a fanned-out run cuts its chunks by: the `GpuProbe`'s NVML view of this machine, or on
    k8s the instance's `gpu` limit (this pod's NVML says nothing about the cluster's GPUs)."""
    if not deployment.is_k8s():
        return gpu.plan()
    try:
        return deployment.cluster_plan(pool_limit(context.instance))
    except LDTMError as exc:
        raise Failure(str(exc)) from None


def plan_chunk_slots(context: OpExecutionContext, plan: SlotPlan, cap: int | None) -> tuple[int, list[str]]:
    """(slots, device per slot) for a fanned-out run, after setting the pool limit from the plan, so
    the very first run uses the plan's slots with or without the daemon's `gpu_pool_sensor`. On k8s
    the limit is the cluster's, set by config, and is left alone, and the devices are the step pods'
    (each gets its own GPU), not those of this planning pod, which has none."""
    slots = max(1, min(plan.total, cap or plan.total))
    if deployment.is_k8s():
        return slots, plan.devices()[:slots]
    before, after = sync_pool_limit(context.instance, plan)
    if before != after:
        context.log.info(f"gpu pool limit {before} -> {after}: {plan.reason}")
    return slots, worker_devices(plan, slots)
