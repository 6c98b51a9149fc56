"""Hyper-parameter studies per ticker: launched by hand or by a backfill, never by the weekly retrain.

Each partition runs trials in its ticker's Optuna study (stored in the application database, so a
second run or another machine adds trials to the same study). `checkpoints` trains with the best
settings when the training profile is `tuned`.
"""

from dagster import (
    AssetExecutionContext,
    BackfillPolicy,
    Config,
    Failure,
    MaterializeResult,
    MetadataValue,
    asset,
)
from pydantic import Field

from ldtm_core.errors import InputError, LDTMError
from ldtm_core.learning import tuning
from ldtm_core.learning.training import parse_overrides

from ..deployment import gpu_step_tags
from ..gpu_pool import GPU_POOL, gpu_slot_lease
from ..metadata import records_table
from ..partition_steps import partition_keys
from ..partitions import ticker_partitions
from ..resources import AppDatabase, ArtifactStore, TrainingProfile


class HpoConfig(Config):
    trials: int = Field(20, ge=1, description="trials to run per ticker in this run")
    timeout_s: float | None = Field(None, gt=0, description="stop starting trials after this many seconds")
    fixed: list[str] = Field(
        default_factory=list, description="fields fixed for every trial, as in `ldtm tune --set key=value`"
    )
    seed: int = Field(0, description="sampler seed: the same seed proposes the same trials")


@asset(
    partitions_def=ticker_partitions,
    backfill_policy=BackfillPolicy.single_run(),
    pool=GPU_POOL,
    op_tags=gpu_step_tags(),
    deps=["prices"],
    group_name="models",
    kinds={"pytorch", "optuna"},
)
def hpo_studies(
    context: AssetExecutionContext,
    config: HpoConfig,
    store: ArtifactStore,
    database: AppDatabase,
    training: TrainingProfile,
) -> MaterializeResult:
    """Optuna study per ticker: trials whose data all ends before the backtest's first fold."""
    database.engine(store)  # opened (an outdated one refused) before the study storage is
    settings = database.settings(store)
    rows = []
    skipped: dict[str, str] = {}
    try:
        fixed = parse_overrides(config.fixed)
        for (
            key,
            value,
        ) in training.overrides().items():  # the resource's settings, unless the study fixes them
            fixed.setdefault(key, value)
        with gpu_slot_lease(context, settings.database_url):
            for ticker in partition_keys(context, "hpo_studies"):
                try:
                    r = tuning.tune(
                        settings,
                        [ticker],
                        config.trials,
                        timeout=config.timeout_s,
                        fixed=fixed,
                        seed=config.seed,
                    )
                except InputError as exc:  # e.g. a late listing: too little history for the backtest's folds
                    context.log.warning(f"{ticker}: no study: {exc}")
                    skipped[ticker] = str(exc)
                    continue
                context.log.info(
                    f"{r.study_name}: {r.ran} trials run, best {r.best_value} (#{r.best_number})"
                )
                rows.append(r)
    except LDTMError as exc:
        raise Failure(f"hpo_studies: {exc}") from None
    table = [
        {
            "ticker": r.tickers[0],
            "study": r.study_name,
            "ran": r.ran,
            "trials": r.n_trials,
            "pruned": r.n_pruned,
            "failed": r.n_failed,
            "best_value": r.best_value,
            "best_trial": r.best_number,
            "holdout_before": r.holdout.get(r.tickers[0], ""),
            **{k: v for k, v in r.best_params.items()},
        }
        for r in rows
    ]
    metadata = {
        "summary": records_table(table),
        "trials": sum(r.n_trials for r in rows),
        "pruned": sum(r.n_pruned for r in rows),
        "settings": MetadataValue.json({r.tickers[0]: r.best_params for r in rows}),
        "skipped": MetadataValue.json(skipped),
    }
    finished = [r.best_value for r in rows if r.best_value is not None]
    if len(rows) == 1 and finished:
        metadata["best_value"] = MetadataValue.float(finished[0])  # charted over time per partition
    elif finished:
        metadata["best_value_mean"] = MetadataValue.float(sum(finished) / len(finished))
    return MaterializeResult(metadata=metadata)
