"""Schedules: the nightly evening run and the weekly retrain, in market time (America/New_York)."""

from zoneinfo import ZoneInfo

from dagster import (
    DefaultScheduleStatus,
    RunRequest,
    ScheduleEvaluationContext,
    schedule,
)

from .gpu_pool import GPU_RUN_TAGS
from .jobs import nightly_market_job, retrain_job
from .partitions import EVENING_TAG, MARKET_TZ, NIGHTLY_CRON, range_tags, ticker_partitions


def _all_tickers_tags() -> dict:
    return range_tags(ticker_partitions.get_partition_keys())


@schedule(
    cron_schedule=NIGHTLY_CRON,
    execution_timezone=MARKET_TZ,
    job=nightly_market_job,
    default_status=DefaultScheduleStatus.RUNNING,
)
def nightly(context: ScheduleEvaluationContext) -> RunRequest:
    """Weekdays at LDTM_NIGHTLY_TIME (18:15 New York by default): prices (from the source LDTM_PRICE_SOURCE names, ldtm_core.data.sources,
    up to that evening), then the features of every ticker as ONE run, tagged with the evening that
    just closed; its success launches that evening's `nightly_job` (snapshots onwards)."""
    evening = context.scheduled_execution_time.astimezone(ZoneInfo(MARKET_TZ)).date().isoformat()
    return RunRequest(run_key=f"nightly:{evening}", tags={**_all_tickers_tags(), EVENING_TAG: evening})


@schedule(
    cron_schedule="0 2 * * 6",
    execution_timezone=MARKET_TZ,
    job=retrain_job,
    default_status=DefaultScheduleStatus.RUNNING,
)
def weekly_retrain(context: ScheduleEvaluationContext) -> RunRequest:
    """Saturday 02:00: refresh features and retrain every ticker as ONE run over the whole partition
    range, then backtest.

    A single run trains the tickers inside one process pool sized by the free `gpu` pool slots;
    each backtest partition that lands then fires `promotion_gate_sensor`.
    """
    return RunRequest(
        run_key=f"weekly_retrain:{context.scheduled_execution_time:%Y-%m-%d}",
        tags={**_all_tickers_tags(), **GPU_RUN_TAGS},
    )
