"""The fan-out of GPU work into chunk steps, shared by `checkpoints` and `backtests`: the planning step
(`plan_chunks`, `chunk_outputs`), the chunk step's loop over its tickers (`run_chunk`, inside
`chunk_step_guard`) and the fan-in (`summarise_chunks`).

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
from dataclasses import dataclass
from typing import Any

from dagster import (
    AssetMaterialization,
    DagsterInstance,
    DagsterRunStatus,
    DynamicOutput,
    Failure,
    MetadataValue,
    OpExecutionContext,
    Output,
)
from sqlalchemy import Engine

from ldtm_core.learning.gpu_slots import SlotPlan
from ldtm_core.learning.process_guard import Watchdog, die_with_parent, die_with_starter
from ldtm_core.learning.ticker_pool import ticker_chunks

from .gpu_pool import chunk_slot_plan, gpu_slot_lease, plan_chunk_slots
from .metadata import records_table
from .partition_steps import partition_keys

RUN_OVER = {
    DagsterRunStatus.SUCCESS,
    DagsterRunStatus.FAILURE,
    DagsterRunStatus.CANCELING,
    DagsterRunStatus.CANCELED,
}
WATCHDOG_INTERVAL_S = 2.0


@dataclass
class ChunkPlan:
    """A fanned-out run's plan: its tickers, those already done since the run started, the rest cut into
    one chunk per slot, and the device of each slot."""

    tickers: list[str]
    done: set[str]
    todo: list[str]
    chunks: list[list[str]]
    slots: int
    devices: list[str]
    slot_plan: SlotPlan
    started: dt.datetime


def plan_chunks(
    context: OpExecutionContext,
    step: str,
    gpu,
    max_workers: int | None,
    engine: Callable[[], Engine],
    done_since: Callable[[Engine, list[str], dt.datetime], set[str]],
    force: bool,
) -> ChunkPlan:
    """Set the pool limit from the slot plan, skip the tickers `done_since` the (original) run started
    unless `force`, and cut the rest into chunks: at least one, even empty, so the summary step runs and
    every partition is materialised. `engine()` opens the database (refusing one behind the code) before any chunk step opens its own."""
    tickers = partition_keys(context, step)
    plan = chunk_slot_plan(context, gpu)
    slots, devices = plan_chunk_slots(context, plan, max_workers)
    db = engine()
    started = run_started_at(context.instance, context.run_id)
    done = set() if force else done_since(db, tickers, started)
    todo = [t for t in tickers if t not in done]
    chunks = ticker_chunks(todo, slots) or [[]]
    return ChunkPlan(tickers, done, todo, chunks, slots, devices, plan, started)


def chunk_outputs(plan: ChunkPlan, fields: dict, plan_fields: dict | None = None) -> Iterator[Output]:
    """The planning step's outputs: one `chunks` output per chunk (its tickers, its slot's device and
    `fields`), then the `plan` the fan-in summarises (with `plan_fields`)."""
    for i, chunk in enumerate(plan.chunks):
        yield DynamicOutput(
            {"tickers": chunk, "device": plan.devices[i % len(plan.devices)], **fields},
            output_name="chunks",
            mapping_key=f"chunk_{i}",
        )
    yield Output(
        {
            "tickers": plan.tickers,
            "skipped": sorted(plan.done),
            "chunks": len(plan.chunks),
            "slots": plan.slots,
            "slot_plan": f"{plan.slot_plan.kind} x{plan.slot_plan.total}: {plan.slot_plan.reason}",
            **(plan_fields or {}),
        },
        output_name="plan",
    )


def run_chunk(
    context: OpExecutionContext,
    chunk: dict,
    work: Callable[[str], tuple[dict, Any]],
    progress: Callable[[Any], str],
    *,
    database_url: str,
    already_done: Callable[[str], bool],
    skipped: str,
    not_done: str,
) -> list[dict]:
    """A chunk step's tickers, one after another in this step process (one pool slot, whose lease it
    holds in the database at `database_url`): `work(ticker)` gives (row, outcome); each row gets the
    step's pid and its start and end, and `progress(outcome)` is logged. A ticker `already_done` (unless
    the chunk says `force`) is skipped with the note `skipped`."""
    rows = []
    # In a multiprocess run this is a child of the run worker: die with it, and stop when the run ends.
    with chunk_step_guard(context) as own_process, gpu_slot_lease(context, database_url):
        for ticker in chunk["tickers"]:
            # A step the executor started after its run ended (failed, cancelled) does nothing; the
            # watchdog covers a run that ends while a ticker is worked on.
            if own_process and run_is_over(context.instance, context.run_id):
                context.log.warning(
                    f"run {context.run_id} is over: {ticker} and the rest of the chunk not {not_done}"
                )
                break
            # Checked again here: a re-execution from failure reuses the plan but not finished tickers.
            if not chunk["force"] and already_done(ticker):
                context.log.info(f"{ticker}: {skipped}: skipped")
                continue
            t0 = time.time()
            row, outcome = work(ticker)
            rows.append({**row, "pid": os.getpid(), "started": t0, "finished": time.time()})
            context.log.info(progress(outcome))
    return rows


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
    die_with_starter()  # the run worker, which under the forkserver is not this process's parent
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
