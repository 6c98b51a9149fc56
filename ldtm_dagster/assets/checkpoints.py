"""`checkpoints`: one trained LSTM per ticker, as a graph that lets the `gpu` pool see every worker.

    plan_checkpoint_chunks ──(one dynamic output per chunk of tickers)──> train_checkpoint_chunk [pool gpu]
                                                                              └── collect ──> checkpoints_summary

Each chunk is its own step in pool `gpu` and trains its tickers one after another in its own step
process, so a run holds exactly as many slots as it has training processes, and the instance enforces
the pool's limit across runs (two retrains on a limit of 2 never train more than 2 tickers at once).
The planning step first sets the pool's limit from the slot plan, so the very first run uses the
plan's slots with or without the daemon's `gpu_pool_sensor`; it then skips tickers that already got a
candidate since the (original) run started, so re-executing a killed retrain resumes it.

A chunk step dies with its run: it asks the kernel to kill it when the run worker dies and polls the
run's status, so a failed or canceled run leaves no orphan training or registering candidates.
"""

import datetime as dt

from dagster import (
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

from ldtm_core.learning import resume
from ldtm_core.learning.training_pool import train_with_settings
from ldtm_core.learning.tuning_store import ticker_settings
from ldtm_core.learning.warm_start import DEFAULT_WARM_START
from ldtm_core.progress import run_line

from ..chunk_fanout import chunk_outputs, plan_chunks, run_chunk, run_started_at, summarise_chunks
from ..deployment import gpu_step_tags
from ..gpu_pool import GPU_POOL
from ..partitions import ticker_partitions
from ..resources import AppDatabase, ArtifactStore, GpuProbe, TrainingProfile

CHECKPOINTS_CONFIG = {
    "as_of": Field(str, default_value="", description="train only on prices up to this date (YYYY-MM-DD)"),
    "warm_start": Field(
        bool,
        default_value=DEFAULT_WARM_START,
        description="fine-tune the ticker's active model when its architecture matches (false: cold start)",
    ),
    "force": Field(
        bool,
        default_value=False,
        description="retrain tickers that already have a candidate since this run (or its original) started",
    ),
}


def _as_of(value: str) -> dt.date | None:
    if not value:
        return None
    try:
        return dt.date.fromisoformat(value)
    except ValueError:
        raise Failure(f"as_of={value!r} is not a date (YYYY-MM-DD)") from None


@op(
    ins={"features": In(Nothing)},
    out={"chunks": DynamicOut(dict), "plan": Out(dict)},
    config_schema=CHECKPOINTS_CONFIG,
)
def plan_checkpoint_chunks(
    context: OpExecutionContext,
    store: ArtifactStore,
    database: AppDatabase,
    training: TrainingProfile,
    gpu: GpuProbe,
):
    """Set the pool limit from the slot plan, skip tickers already done, cut the rest into chunks."""
    cfg = context.op_config
    as_of = _as_of(cfg["as_of"])
    p = plan_chunks(
        context,
        "checkpoints",
        gpu,
        training.max_workers,
        lambda: database.engine(store),
        lambda engine, tickers, started: resume.trained_since(engine, tickers, started, as_of),
        cfg["force"],
    )
    if p.done:
        context.log.info(
            f"resuming: {len(p.done)} ticker(s) already have a candidate since {p.started:%Y-%m-%d %H:%M:%S} UTC "
            f"({', '.join(sorted(p.done)[:10])}{'…' if len(p.done) > 10 else ''}); force=true retrains them"
        )
    context.log.info(
        f"training {len(p.todo)} ticker(s) in {len(p.chunks)} chunk(s) on up to {p.slots} slot(s): {p.slot_plan.reason}"
    )
    fields = {
        "as_of": cfg["as_of"],
        "warm_start": cfg["warm_start"],
        "force": cfg["force"],
        "run_tickers": p.todo,
    }
    yield from chunk_outputs(p, fields, {"started": p.started.isoformat()})


@op(pool=GPU_POOL, tags=gpu_step_tags())
def train_checkpoint_chunk(
    context: OpExecutionContext,
    chunk: dict,
    store: ArtifactStore,
    database: AppDatabase,
    training: TrainingProfile,
) -> list:
    """Train one chunk's tickers in this step process (one pool slot), one after another."""
    engine, settings = database.engine(store), database.settings(store)
    # Per ticker: the profile's config, or with `tuned` the ticker's best trial (reference without a study).
    per_ticker = ticker_settings(
        settings.database_url, chunk["tickers"], training.profile, training.overrides()
    )
    as_of = _as_of(chunk["as_of"])
    run_tickers = chunk["run_tickers"]
    started = run_started_at(context.instance, context.run_id)

    def train(ticker: str) -> tuple[dict, object]:
        o = train_with_settings(
            engine,
            ticker,
            chunk["device"],
            1,
            settings=settings,
            per_ticker=per_ticker,
            as_of=as_of,
            warm_start=chunk["warm_start"],
        )
        row = {
            "ticker": o.ticker,
            "settings": o.profile or "",  # with profile `tuned`: tuned, or reference where no study
            "device": o.device or "",
            "duration_s": round(o.duration_s, 2),
            "epochs": o.epochs,
            "status": o.status,
            "val_loss": o.val_loss,
            "model_id": o.model_id,
            "reason": o.reason,
            "features": o.features,  # stored, or recomputed and why
        }
        return row, o

    return run_chunk(
        context,
        chunk,
        train,
        lambda o: _progress_line(engine, o, run_tickers, started, as_of),
        database_url=settings.database_url,
        already_done=lambda t: bool(resume.trained_since(engine, [t], started, as_of)),
        skipped="candidate already registered since the run started",
        not_done="trained",
    )


def _progress_line(engine, outcome, run_tickers: list[str], started: dt.datetime, as_of) -> str:
    """`AAPL trained (run: 37/103 done, ETA 12m30s)`: n counts every chunk's registered candidates."""
    n_done = len(resume.trained_since(engine, run_tickers, started, as_of))
    elapsed = (dt.datetime.now(dt.UTC) - started).total_seconds()
    what = outcome.status + (f": {outcome.reason}" if outcome.reason else "")
    return run_line(f"{outcome.ticker} {what}", n_done, len(run_tickers), elapsed, "trained")


@op(out=Out(Nothing))
def checkpoints_summary(context: OpExecutionContext, plan: dict, chunk_rows: list) -> None:
    """Every ticker's outcome as the asset's metadata; the step fails naming the tickers that failed,
    after the others were materialised (`summarise_chunks`)."""
    summarise_chunks(
        context,
        "checkpoints",
        plan,
        chunk_rows,
        skipped_reason="candidate already registered by this run",
        spans_key="train_spans",
        failure="training",
        counts=lambda rows: {s: sum(r["status"] == s for r in rows) for s in ("trained", "skipped")},
    )


@graph_asset(
    partitions_def=ticker_partitions,
    backfill_policy=BackfillPolicy.single_run(),
    ins={"features": AssetIn(dagster_type=Nothing)},  # trained on the stored, current features
    group_name="models",
    kinds={"pytorch"},
    config=ConfigMapping(
        config_schema=CHECKPOINTS_CONFIG,
        config_fn=lambda c: {"plan_checkpoint_chunks": {"config": c}},
    ),
)
def checkpoints(features):
    """One trained LSTM checkpoint per ticker, registered as a `candidate` in the model registry."""
    chunks, plan = plan_checkpoint_chunks(features)
    return checkpoints_summary(plan, chunks.map(train_checkpoint_chunk).collect())
