"""Alerting sensors: every failed run, and missing snapshots at the evening deadline, go to the
notification webhook (LDTM_NOTIFY_WEBHOOK_URL, the same one as gate failures). Nobody watches a
console at night.

One alert per logical failure: a failed run that run_retries will re-execute (Dagster's
`dagster/will_retry` tag) is not posted; its retry's failure is, naming the retry and the first run."""

from __future__ import annotations

from dagster import (
    DefaultSensorStatus,
    RunFailureSensorContext,
    SensorEvaluationContext,
    SkipReason,
    run_failure_sensor,
    sensor,
)
from dagster._core.storage.tags import (
    ASSET_PARTITION_RANGE_END_TAG,
    ASSET_PARTITION_RANGE_START_TAG,
    RETRY_NUMBER_TAG,
    WILL_RETRY_TAG,
)
from dagster._utils.tags import get_boolean_tag_value

from ldtm_core.accountability.alerts import operator_alerts
from ldtm_core.config import setting
from ldtm_core.data import calendar

from .chunk_fanout import FAILED_TICKERS
from .resources import AppDatabase, ArtifactStore

WEBHOOK_ENV = "LDTM_NOTIFY_WEBHOOK_URL"


def _failed_tickers(context: RunFailureSensorContext) -> dict[str, str] | None:
    """{ticker: error} a fanned-out step failed with (chunk_fanout.summarise_chunks), else None."""
    found: dict[str, str] = {}
    for event in context.get_step_failure_events():
        data = getattr(event.event_specific_data, "user_failure_data", None)
        value = (data.metadata or {}).get(FAILED_TICKERS) if data is not None else None
        if value is not None and isinstance(value.value, dict):
            found.update({str(k): str(v) for k, v in value.value.items()})
    return found or None


def _error_text(context: RunFailureSensorContext) -> str:
    """The failing step's own error (what went wrong), else the run's error where the run itself failed
    (a resource's setup: its innermost cause, the resource's own message), else the run failure message."""
    for event in context.get_step_failure_events():
        error = getattr(event.event_specific_data, "error", None)
        if error is not None and error.message:
            return error.message
    error = getattr(context.failure_event.event_specific_data, "error", None)
    while error is not None and error.cause is not None:
        error = error.cause
    if error is not None and error.message:
        return error.message
    return context.failure_event.message or ""


def retry_pending(context: RunFailureSensorContext) -> bool:
    """Whether run_retries will re-execute this failed run: Dagster tags it `dagster/will_retry=true`
    as it records the failure (only where run_retries is enabled), read again here for the newest tags."""
    run = context.instance.get_run_by_id(context.dagster_run.run_id) or context.dagster_run
    return get_boolean_tag_value(run.tags.get(WILL_RETRY_TAG), default_value=False)


def _retry_fields(run) -> dict:
    """Where the failed run is an automatic retry: its number and the run it retried, and the first."""
    if run.tags.get(RETRY_NUMBER_TAG) is None:
        return {}
    return {
        "retry_number": int(run.tags[RETRY_NUMBER_TAG]),
        "retry_of": run.parent_run_id,
        "root_run_id": run.root_run_id,
    }


@run_failure_sensor(
    name="run_failure_alert", default_status=DefaultSensorStatus.RUNNING, minimum_interval_seconds=30
)
def run_failure_alert(context: RunFailureSensorContext) -> None:
    """Post job, partition, run id and the error's first line of every failed run (never a secret),
    except a run whose automatic retry is pending: the retry's own outcome is the one reported."""
    run = context.dagster_run
    if retry_pending(context):
        context.log.info(f"run {run.run_id} failed and will be retried (run_retries): no alert for it")
        return
    webhook = setting(WEBHOOK_ENV)
    payload = operator_alerts.run_failure_payload(
        job=run.job_name,
        partition=run.tags.get("dagster/partition")
        or (
            f"{run.tags[ASSET_PARTITION_RANGE_START_TAG]}...{run.tags[ASSET_PARTITION_RANGE_END_TAG]}"
            if ASSET_PARTITION_RANGE_START_TAG in run.tags
            else None
        ),
        run_id=run.run_id,
        error=_error_text(context),
        failed_tickers=_failed_tickers(context),
        database_url=setting("LDTM_DATABASE_URL"),
        webhook_url=webhook,
    )
    payload.update(_retry_fields(run))
    result = operator_alerts.notify_run_failure(payload, webhook)
    if webhook and not result.posted:
        context.log.warning(f"run failure alert for {run.run_id} not delivered: {result.error}")


@sensor(minimum_interval_seconds=600, default_status=DefaultSensorStatus.RUNNING)
def snapshots_freshness_alert(
    context: SensorEvaluationContext, store: ArtifactStore, database: AppDatabase
) -> SkipReason:
    """After the deadline (LDTM_SNAPSHOT_DEADLINE, New York time; its default is the row in config.SETTINGS), alert once per session
    that has no snapshot row. The cursor is the last session alerted for."""
    freshness = operator_alerts.snapshot_freshness(database.engine(store), calendar.now())
    if not freshness.stale:
        return SkipReason(f"session {freshness.session}: {freshness.rows} snapshot rows")
    if context.cursor == str(freshness.session):
        return SkipReason(f"session {freshness.session}: no snapshots, already alerted")
    result = operator_alerts.notify_stale_snapshots(freshness, setting(WEBHOOK_ENV))
    context.update_cursor(str(freshness.session))
    delivered = "posted" if result.posted else f"not posted ({result.error or 'no webhook configured'})"
    return SkipReason(f"session {freshness.session}: no snapshots by the deadline; alert {delivered}")
