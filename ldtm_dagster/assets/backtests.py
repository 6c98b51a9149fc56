"""`backtests`: walk-forward folds of each ticker's newest candidate, fanned out like `checkpoints`.

    plan_backtest_chunks ──(one dynamic output per chunk of tickers)──> backtest_chunk [pool gpu]
                                                        └── collect ──> backtests_summary + backtests_no_leakage

A backtest is `folds` trainings, so it is the weekly loop's heaviest phase. Each chunk is its own step
in pool `gpu`, one process with one thread per slot (two single-threaded processes beat one
two-threaded one on a CPU), so a run holds exactly as many slots as it has training processes and the
instance enforces the pool's limit across runs. A chunk step dies with its run (`chunk_step_guard`),
and re-executing a killed run skips tickers whose folds it already wrote (`force: true` redoes them).
"""

import datetime as dt
import time

from dagster import (
    AssetCheckResult,
    AssetCheckSeverity,
    AssetCheckSpec,
    AssetIn,
    BackfillPolicy,
    ConfigMapping,
    DynamicOut,
    Failure,
    Field,
    In,
    Nothing,
    OpExecutionContext,
    Out,
    graph_asset,
    op,
)

from ldtm_core.accountability.gate.backtest_pool import backtest_candidate
from ldtm_core.learning import resume
from ldtm_core.learning.backtest import DEFAULT_FOLDS, DEFAULT_WARM_START
from ldtm_core.progress import run_line

from ..chunk_fanout import chunk_outputs, plan_chunks, run_chunk, run_started_at, summarise_chunks
from ..deployment import gpu_step_tags
from ..gpu_pool import GPU_POOL
from ..partitions import ticker_partitions
from ..resources import AppDatabase, ArtifactStore, GpuProbe, TrainingProfile

BACKTESTS_CONFIG = {
    "folds": Field(
        int, default_value=DEFAULT_FOLDS, description="walk-forward folds (the gate needs at least 2)"
    ),
    "warm_start": Field(
        bool,
        default_value=DEFAULT_WARM_START,
        description="start fold k+1 from fold k's weights (fold 1 is always cold; default cold: a completed quarter then refits one fold, not all)",
    ),
    "force": Field(
        bool,
        default_value=False,
        description="backtest tickers whose folds were already written since this run (or its original) started",
    ),
}


@op(
    ins={"checkpoints": In(Nothing), "features": In(Nothing)},
    out={"chunks": DynamicOut(dict), "plan": Out(dict)},
    config_schema=BACKTESTS_CONFIG,
)
def plan_backtest_chunks(
    context: OpExecutionContext,
    store: ArtifactStore,
    database: AppDatabase,
    training: TrainingProfile,
    gpu: GpuProbe,
):
    """Set the pool limit from the slot plan, skip tickers already done, cut the rest into chunks."""
    cfg = context.op_config
    if cfg["folds"] < 2:
        raise Failure(f"backtests: folds must be at least 2 (the gate needs 2), not {cfg['folds']}")
    p = plan_chunks(
        context,
        "backtests",
        gpu,
        training.max_workers,
        lambda: database.engine(store),
        resume.backtested_since,
        cfg["force"],
    )
    if p.done:
        context.log.info(
            f"resuming: {len(p.done)} ticker(s) already backtested since {p.started:%Y-%m-%d %H:%M:%S} UTC; "
            "force=true backtests them again"
        )
    context.log.info(
        f"backtesting {len(p.todo)} ticker(s) x {cfg['folds']} folds in {len(p.chunks)} chunk(s) on up to "
        f"{p.slots} slot(s): {p.slot_plan.reason}"
    )
    # planned_at: the backtest phase's start, for the ETA
    yield from chunk_outputs(p, {"run_tickers": p.todo, "planned_at": time.time(), **cfg})


@op(pool=GPU_POOL, tags=gpu_step_tags())
def backtest_chunk(
    context: OpExecutionContext, chunk: dict, store: ArtifactStore, database: AppDatabase
) -> list:
    """Backtest one chunk's tickers in this step process (one pool slot), one after another."""
    engine, settings = database.engine(store), database.settings(store)
    started = run_started_at(context.instance, context.run_id)

    def backtest(ticker: str) -> tuple[dict, object]:
        outcome = backtest_candidate(
            engine,
            ticker,
            chunk["device"],
            1,
            settings=settings,
            folds=chunk["folds"],
            warm_start=chunk["warm_start"],
        )
        return outcome.row(), outcome

    return run_chunk(
        context,
        chunk,
        backtest,
        lambda o: _progress_line(engine, o, chunk["run_tickers"], started, chunk["planned_at"]),
        database_url=settings.database_url,
        already_done=lambda t: bool(resume.backtested_since(engine, [t], started)),
        skipped="already backtested since the run started",
        not_done="backtested",
    )


def _progress_line(engine, outcome, run_tickers: list[str], started: dt.datetime, planned_at: float) -> str:
    """`AAPL ok: 3 folds, accuracy 52.1% (run: 37/103 backtested, ETA 12m30s)`, counted over every chunk."""
    n_done = len(resume.backtested_since(engine, run_tickers, started))
    what = outcome.status + (f": {outcome.reason}" if outcome.reason else "")
    if outcome.result is not None:
        r = outcome.result
        what += (
            f": {len(r.folds)} folds ({r.reused_folds} reused, {r.refit_folds} refit), "
            f"accuracy {r.direction_accuracy:.1%}"
        )
    return run_line(
        f"{outcome.ticker} {what}", n_done, len(run_tickers), time.time() - planned_at, "backtested"
    )


@op(out=Out(Nothing))
def backtests_summary(context: OpExecutionContext, plan: dict, chunk_rows: list) -> None:
    """Every ticker's backtest as the asset's metadata; the step fails naming the tickers that failed,
    after the others were materialised (`summarise_chunks`)."""
    summarise_chunks(
        context,
        "backtests",
        plan,
        chunk_rows,
        skipped_reason="already backtested by this run",
        spans_key="backtest_spans",
        failure="backtests",
        counts=lambda rows: {
            "leakage_rows": _leakage(rows),
            "tickers": len(rows),
            "folds_reused": sum(r.get("folds_reused", 0) for r in rows),
            "folds_refit": sum(r.get("folds_refit", 0) for r in rows),
        },
    )


def _leakage(rows: list[dict]) -> int:
    return sum(r.get("leakage_rows", 0) for r in rows)


@op
def check_no_leakage(chunk_rows: list):  # no return annotation: Dagster turns the result into a check event
    """Leakage rows over every fold of the run: test rows dated <= cutoff or training targets > cutoff."""
    leakage = _leakage([r for chunk in chunk_rows for r in chunk])
    return AssetCheckResult(
        check_name="no_leakage",
        passed=leakage == 0,
        severity=AssetCheckSeverity.ERROR,
        metadata={"leakage_rows": leakage},
        description="test rows dated <= cutoff or training targets dated > cutoff (must be 0)",
    )


@graph_asset(
    partitions_def=ticker_partitions,
    backfill_policy=BackfillPolicy.single_run(),
    ins={
        "checkpoints": AssetIn(dagster_type=Nothing),
        "features": AssetIn(dagster_type=Nothing),
    },
    group_name="models",
    kinds={"pytorch"},
    check_specs=[AssetCheckSpec("no_leakage", asset="backtests", blocking=True)],
    config=ConfigMapping(
        config_schema=BACKTESTS_CONFIG,
        config_fn=lambda c: {"plan_backtest_chunks": {"config": c}},
    ),
)
def backtests(checkpoints, features):
    """Walk-forward backtest folds (rows of `backtest_folds`) of each ticker's newest candidate."""
    chunks, plan = plan_backtest_chunks(checkpoints=checkpoints, features=features)
    rows = chunks.map(backtest_chunk).collect()
    return {"result": backtests_summary(plan, rows), "backtests_no_leakage": check_no_leakage(rows)}
