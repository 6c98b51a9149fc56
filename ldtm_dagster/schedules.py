"""Schedules: the nightly evening run and the weekly retrain, in market time (America/New_York)."""

from dagster import (
    DefaultScheduleStatus,
    RunRequest,
    ScheduleEvaluationContext,
    build_schedule_from_partitioned_job,
    schedule,
)
from dagster._core.storage.tags import ASSET_PARTITION_RANGE_END_TAG, ASSET_PARTITION_RANGE_START_TAG

from .jobs import nightly_job, retrain_job
from .partitions import MARKET_TZ, ticker_partitions
from .pool import GPU_RUN_TAGS

# Weekdays 18:15 New York (the evening partitions' own cron): targets the evening that just closed.
# Its `prices` step fetches from LDTM_PRICE_SOURCE (synthetic | files:<dir> | yfinance | ib) up to that evening.
nightly = build_schedule_from_partitioned_job(
    nightly_job, name="nightly", default_status=DefaultScheduleStatus.RUNNING
)


@schedule(
    cron_schedule="0 2 * * 6",
    execution_timezone=MARKET_TZ,
    job=retrain_job,
    default_status=DefaultScheduleStatus.RUNNING,
)
def weekly_retrain(context: ScheduleEvaluationContext) -> RunRequest:
    """Saturday 02:00: retrain every ticker as ONE run over the whole partition range, then backtest.

    A single run trains the tickers inside one process pool sized by the free `gpu` pool slots;
    each backtest partition that lands then fires `promotion_gate_sensor`.
    """
    keys = ticker_partitions.get_partition_keys()
    return RunRequest(
        run_key=f"weekly_retrain:{context.scheduled_execution_time:%Y-%m-%d}",
        tags={
            ASSET_PARTITION_RANGE_START_TAG: keys[0],
            ASSET_PARTITION_RANGE_END_TAG: keys[-1],
            **GPU_RUN_TAGS,
        },
    )
