"""Sensors: record each file dropped for a submitted model and judge them after each nightly, keep the `gpu`
pool sized to free VRAM, run the promotion gate per backtest (a global recipe's
universe decision per recipe backtest), start an evening's snapshots once its prices and features have
landed, and backtest the tickers a partly failed retrain trained."""

from pathlib import Path

from dagster import (
    AssetKey,
    AssetRecordsFilter,
    DagsterRunStatus,
    DefaultSensorStatus,
    RunFailureSensorContext,
    RunRequest,
    RunStatusSensorContext,
    SensorEvaluationContext,
    SensorResult,
    SkipReason,
    run_failure_sensor,
    run_status_sensor,
    sensor,
)

from ldtm_core.accountability.gate import gate
from ldtm_core.config import setting_text

from . import deployment
from .gpu_pool import pool_limit, sync_pool_limit
from .jobs import (
    backtests_job,
    external_judgement_job,
    nightly_job,
    nightly_market_job,
    promotion_job,
    recipe_decision_job,
    retrain_job,
    submission_job,
)
from .partitions import EVENING_TAG, ticker_partitions
from .resources import AppDatabase, ArtifactStore, GpuProbe
from .retrain_recovery import backtest_requests

BACKTESTS = AssetKey("backtests")
RECIPE_BACKTESTS = AssetKey("recipe_backtests")
# Materializations read per tick; a longer backlog is worked off over the next ticks.
BATCH = 500


@sensor(minimum_interval_seconds=180, default_status=DefaultSensorStatus.RUNNING)
def gpu_pool_sensor(context: SensorEvaluationContext, gpu: GpuProbe) -> SkipReason:
    """Re-derive the `gpu` pool limit from NVML (CPU-sized without a GPU) and set it on the instance.
    On k8s it only reports: the daemon pod's NVML is not the cluster's GPUs (deployment.py)."""
    if deployment.is_k8s():
        limit = pool_limit(context.instance)
        return SkipReason(
            f"gpu pool at {limit} (k8s: the cluster's limit, set on the instance; not from NVML)"
        )
    plan = gpu.plan()
    before, after = sync_pool_limit(context.instance, plan)
    change = f"{before} -> {after}" if before != after else f"unchanged at {after}"
    return SkipReason(f"gpu pool {change} ({plan.kind}): {plan.reason}")


@sensor(job=promotion_job, minimum_interval_seconds=30, default_status=DefaultSensorStatus.RUNNING)
def promotion_gate_sensor(
    context: SensorEvaluationContext, store: ArtifactStore, database: AppDatabase
) -> SensorResult:
    """One gate run per new `backtests` partition materialization (cursor = last storage id seen),
    except for a backtest the gate already judged.

    `@asset_sensor` would fire once when several tickers land between two ticks, so this reads
    every materialization after the cursor; the run key (partition, storage id) makes a repeated
    evaluation a no-op and a later re-materialization a new run. A materialization names the backtest
    it stored (`backtest_id`); one with a decision in `gate_decisions` is skipped, so a daemon starting
    with no cursor (`make dev` after `make demo`) re-judges and re-notifies nothing.
    """
    after = int(context.cursor) if context.cursor else None
    records = context.instance.fetch_materializations(
        AssetRecordsFilter(asset_key=BACKTESTS, after_storage_id=after), limit=BATCH, ascending=True
    ).records
    known = set(ticker_partitions.get_partition_keys())
    backtest_ids = {r.storage_id: _backtest_id(r) for r in records}
    wanted = {b for b in backtest_ids.values() if b}
    # Only read the app database when there is something to look up.
    judged = gate.judged_backtests(database.engine(store), wanted) if wanted else {}
    requests = []
    for record in records:
        key = record.partition_key
        if key not in known:
            context.log.warning(
                f"backtests materialization {record.storage_id} has partition {key!r} not in the universe"
            )
            continue
        backtest = backtest_ids[record.storage_id]
        if backtest in judged:
            context.log.info(
                f"{key}: backtest {backtest} already judged ({'passed' if judged[backtest] else 'failed'}): "
                "no gate run"
            )
            continue
        requests.append(
            RunRequest(run_key=f"{key}:{record.storage_id}", partition_key=key, job_name=promotion_job.name)
        )
    cursor = str(records[-1].storage_id) if records else context.cursor
    return SensorResult(run_requests=requests, cursor=cursor)


def _backtest_id(record) -> str | None:
    """The backtest a `backtests` partition materialization stored (None for older ones, or none run)."""
    value = record.asset_materialization.metadata.get("backtest_id")
    return str(value.value) if value is not None and value.value else None


@run_status_sensor(
    run_status=DagsterRunStatus.SUCCESS,
    monitored_jobs=[nightly_market_job],
    request_job=nightly_job,
    default_status=DefaultSensorStatus.RUNNING,
)
def nightly_after_market(context: RunStatusSensorContext) -> RunRequest | SkipReason:
    """The evening's `nightly_job` (snapshots, fillbacks, leaderboard) once its market run (prices ->
    features) succeeded: the second half of the nightly, which Dagster cannot run in the same run
    because `snapshots` is partitioned by evening and `features` by ticker."""
    run = context.dagster_run
    evening = run.tags.get(EVENING_TAG)
    if not evening:
        return SkipReason(f"market run {run.run_id} has no {EVENING_TAG} tag (started by hand): no snapshots")
    return RunRequest(run_key=f"nightly:{evening}:{run.run_id}", partition_key=evening)


@run_failure_sensor(
    monitored_jobs=[retrain_job],
    request_job=backtests_job,
    default_status=DefaultSensorStatus.RUNNING,
)
def retrain_backtests_sensor(context: RunFailureSensorContext) -> list[RunRequest] | SkipReason:
    """Backtests (and so, through `promotion_gate_sensor`, gate runs) for the tickers a failed retrain
    trained but never backtested: its partly failed `checkpoints` step skipped the run's `backtests`."""
    run = context.dagster_run
    requests = backtest_requests(context.instance, run)
    return requests or SkipReason(
        f"retrain {run.run_id} owes no backtests (none trained, or its backtests ran)"
    )


@sensor(job=recipe_decision_job, minimum_interval_seconds=30, default_status=DefaultSensorStatus.RUNNING)
def recipe_decision_sensor(context: SensorEvaluationContext) -> SensorResult:
    """One universe decision run per new `recipe_backtests` materialization (cursor = last storage id
    seen; the run key makes a repeated evaluation a no-op). A decision already taken on the same backtests
    is not taken twice: each member's gate refuses a judged backtest and the trials ledger counts it once."""
    after = int(context.cursor) if context.cursor else None
    records = context.instance.fetch_materializations(
        AssetRecordsFilter(asset_key=RECIPE_BACKTESTS, after_storage_id=after), limit=BATCH, ascending=True
    ).records
    requests = [
        RunRequest(run_key=f"{r.partition_key}:{r.storage_id}", partition_key=r.partition_key)
        for r in records
        if r.partition_key
    ]
    cursor = str(records[-1].storage_id) if records else context.cursor
    return SensorResult(run_requests=requests, cursor=cursor)


SUBMISSION_SUFFIXES = (".csv", ".parquet")
NIGHTLY_RUN_TAG = "ldtm/nightly_run"  # on a judgement run: the nightly_job run it followed


@sensor(job=submission_job, minimum_interval_seconds=30, default_status=DefaultSensorStatus.RUNNING)
def submission_sensor(context: SensorEvaluationContext) -> list[RunRequest] | SkipReason:
    """One `submission_job` run per new file in LDTM_SUBMISSIONS_DIR/<model name>/ (a .csv or .parquet).
    The run key is the file with its size and modification time: a file is submitted once, and a file
    written again is submitted again (then refused if it changes a recorded forecast)."""
    root = setting_text("LDTM_SUBMISSIONS_DIR")
    if not root:
        return SkipReason("LDTM_SUBMISSIONS_DIR is not set: no drop folder to watch")
    folder = Path(root)
    if not folder.is_dir():
        return SkipReason(f"LDTM_SUBMISSIONS_DIR={root} is not a folder")
    requests = []
    for path in sorted(folder.glob("*/*")):
        if path.suffix.lower() not in SUBMISSION_SUFFIXES or not path.is_file():
            continue
        st = path.stat()
        config = {"model": path.parent.name, "path": str(path)}
        requests.append(
            RunRequest(
                run_key=f"{path}:{st.st_size}:{st.st_mtime_ns}",
                run_config={"ops": {"submissions": {"config": config}}},
                tags={"ldtm/submitted_model": path.parent.name},
            )
        )
    return requests or SkipReason(f"no submission file in {root}/<model name>/")


@run_status_sensor(
    run_status=DagsterRunStatus.SUCCESS,
    monitored_jobs=[nightly_job],
    request_job=external_judgement_job,
    default_status=DefaultSensorStatus.RUNNING,
)
def judge_after_nightly(context: RunStatusSensorContext) -> RunRequest:
    """Every submitted model judged on its live record once an evening's fillbacks are in."""
    run_id = context.dagster_run.run_id
    return RunRequest(run_key=f"judge:{run_id}", tags={NIGHTLY_RUN_TAG: run_id})
