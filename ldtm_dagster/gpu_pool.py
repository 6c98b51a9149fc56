"""The `gpu` concurrency pool: its limit follows free VRAM (SPEC §6), set on the Dagster instance; the
fan-out of GPU work into chunk steps that hold its slots (plan, guard, fan-in).

Every GPU-bound step (training, backtests, inference) declares `pool="gpu"`, and each such step is
ONE process on one device: training and backtests fan out into one step per ticker chunk
(`assets/checkpoints.py`, `assets/backtests.py`), so a run holds a slot per training process and the
instance enforces the limit across runs. The limit is written to the instance's event log storage,
which every executor re-reads; it is set by `gpu_pool_sensor` and, before its chunk steps start, by
every fanned-out run itself.

A chunk step dies with its run: it asks the kernel to kill it when the run worker dies and polls the
run's status, so a failed or canceled run leaves no orphan training behind (`chunk_step_guard`).
"""

from __future__ import annotations

import datetime as dt
import multiprocessing
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from dagster import (
    AssetMaterialization,
    DagsterInstance,
    DagsterRunStatus,
    Failure,
    MetadataValue,
    OpExecutionContext,
)

from ldtm_core.errors import LDTMError
from ldtm_core.learning.gpu_slots import ENV_POOL_ID, SlotPlan
from ldtm_core.learning.process_guard import Watchdog, die_with_parent
from ldtm_core.learning.ticker_pool import worker_devices

from . import deployment
from .metadata import records_table

GPU_POOL = "gpu"
# Tag on runs that hold GPU steps, so they can be found and filtered (and capped in dagster.yaml).
GPU_RUN_TAGS = {"ldtm/gpu": "true"}
RUN_OVER = {
    DagsterRunStatus.SUCCESS,
    DagsterRunStatus.FAILURE,
    DagsterRunStatus.CANCELING,
    DagsterRunStatus.CANCELED,
}
WATCHDOG_INTERVAL_S = 2.0


def mark_pool_processes() -> str:
    """Mark every process started after this call (run workers, step processes, their ticker-pool
    workers) as this instance's `gpu` pool, so the pool's limit counts the VRAM they hold as its own
    (gpu_slots.probe) instead of shrinking under its own load. Called once when the code location loads
    (definitions.py); a value set by the deployment wins. Returns the marker in force."""
    return os.environ.setdefault(ENV_POOL_ID, f"{GPU_POOL}@{os.environ.get('DAGSTER_HOME') or os.getcwd()}")


def pool_limit(instance: DagsterInstance) -> int | None:
    """The limit the instance currently enforces for `gpu` (None when it enforces none)."""
    return instance.event_log_storage.get_concurrency_info(GPU_POOL).limit


def sync_pool_limit(instance: DagsterInstance, plan: SlotPlan) -> tuple[int | None, int]:
    """Set the `gpu` pool to the plan's slot count; returns (previous, new). Writes only on change."""
    info = instance.event_log_storage.get_concurrency_info(GPU_POOL)
    if info.using_default_limit or info.limit is None or info.slot_count != plan.total:
        instance.event_log_storage.set_concurrency_slots(GPU_POOL, plan.total)
    return info.limit, plan.total


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


def run_started_at(instance: DagsterInstance, run_id: str) -> dt.datetime:
    """When this run's group began: a re-execution resumes from its root run's start."""
    run = instance.get_run_by_id(run_id)
    root = (run.root_run_id if run else None) or run_id
    record = instance.get_run_record_by_id(root)
    ts = (record.start_time or record.create_timestamp.timestamp()) if record else time.time()
    return dt.datetime.fromtimestamp(ts, dt.UTC)


def run_is_over(instance: DagsterInstance, run_id: str) -> bool:
    run = instance.get_run_by_id(run_id)
    return run is None or run.status in RUN_OVER


@contextmanager
def chunk_step_guard(context: OpExecutionContext) -> Iterator[bool]:
    """Inside a chunk step: yields whether the step is its own process (multiprocess executor). If it
    is, the step dies with the run worker and stops itself within `WATCHDOG_INTERVAL_S` once the run
    is over (failed, canceled), taking its pool workers with it."""
    own_process = multiprocessing.parent_process() is not None
    if not own_process:
        yield False
        return
    die_with_parent()
    with Watchdog(lambda: run_is_over(context.instance, context.run_id), WATCHDOG_INTERVAL_S):
        yield True


TIMING_FIELDS = ("pid", "started", "finished")


def summarise_chunks(
    context: OpExecutionContext,
    asset_key: str,
    plan: dict,
    chunk_rows: list[list[dict]],
    *,
    skipped_reason: str,
    spans_key: str,
    failure: str,
    counts: Callable[[list[dict]], dict],
) -> None:
    """The fan-in of a fanned-out asset: every ticker's row (the chunks' plus the plan's skips) as the
    asset's metadata with `counts(rows)`, the chunks' slots and wall time, and each step's (pid, start,
    end) under `spans_key`; each partition also gets its own ticker's row.

    Not all-or-nothing: when some tickers failed, the others' partitions are materialised here (so
    their downstream work, e.g. the promotion gate, goes ahead) and the step then raises `Failure`
    naming each failed ticker with its error (metadata `failed_tickers`, read by the run-failure
    alert), so the run ends failed and only the failed partitions stay unmaterialised.
    """
    rows = [r for chunk in chunk_rows for r in chunk]
    rows += [{"ticker": t, "status": "skipped", "reason": skipped_reason} for t in plan["skipped"]]
    rows.sort(key=lambda r: r["ticker"])
    spans = [[r[k] for k in TIMING_FIELDS] for r in rows if "started" in r]
    failed = [r for r in rows if r["status"] == "failed"]
    metadata = {
        "summary": records_table([{k: v for k, v in r.items() if k not in TIMING_FIELDS} for r in rows]),
        **counts(rows),
        "failed": len(failed),
        "chunks": plan["chunks"],
        "slots": plan["slots"],
        "slot_plan": plan["slot_plan"],
        "wall_s": round(max(e for _, _, e in spans) - min(s for _, s, _ in spans), 2) if spans else 0.0,
        spans_key: spans,
    }
    if not failed:
        for r in rows:
            # OpExecutionContext has no add_asset_metadata; its step context does (public in AssetExecutionContext).
            context.get_step_execution_context().add_asset_metadata(
                ticker_metadata(r), asset_key=asset_key, partition_key=r["ticker"]
            )
        context.add_output_metadata(metadata)
        return
    done = [r for r in rows if r["status"] != "failed"]
    for r in done:
        context.log_event(
            AssetMaterialization(
                asset_key=asset_key, partition=r["ticker"], metadata={**metadata, **ticker_metadata(r)}
            )
        )
    reasons = {r["ticker"]: r.get("reason") or "no reason given" for r in failed}
    named = "; ".join(f"{t}: {why}" for t, why in reasons.items())
    others = (
        f"{len(done)} other(s) materialised: {', '.join(r['ticker'] for r in done)}" if done else "none other"
    )
    raise Failure(
        f"{failure} failed for {len(failed)} of {len(rows)} ticker(s): {named}; {others}",
        metadata={**metadata, FAILED_TICKERS: MetadataValue.json(reasons)},
        allow_retries=False,  # a deterministic failure fails again; the others are already stored
    )


# Failure metadata key: {ticker: error} of the tickers that failed (ldtm_dagster/alert_sensors.py posts it).
FAILED_TICKERS = "failed_tickers"


def ticker_metadata(row: dict) -> dict:
    """One ticker's row as its partition's metadata: plain values only, timing and empty values left out."""
    return {
        k: v
        for k, v in row.items()
        if k not in TIMING_FIELDS and v is not None and isinstance(v, str | int | float | bool)
    }
