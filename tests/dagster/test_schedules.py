"""The nightly and weekly schedules, evaluated with Dagster's schedule test context."""

from __future__ import annotations

import datetime as dt
from zoneinfo import ZoneInfo

import pytest
from dagster import build_schedule_context
from dagster._core.storage.tags import ASSET_PARTITION_RANGE_END_TAG, ASSET_PARTITION_RANGE_START_TAG

from ldtm_dagster.partitions import EVENING_TAG, ticker_partitions
from ldtm_dagster.schedules import nightly, weekly_retrain

NY = ZoneInfo("America/New_York")


def _requests(schedule, when: dt.datetime, instance):
    context = build_schedule_context(instance=instance, scheduled_execution_time=when)
    return schedule.evaluate_tick(context).run_requests


def test_nightly_runs_weekdays_at_1815_new_york_for_that_evening(dagster_instance):
    assert (nightly.cron_schedule, nightly.execution_timezone) == ("15 18 * * 1-5", "America/New_York")
    assert nightly.job_name == "nightly_market_job"
    keys = ticker_partitions.get_partition_keys()
    # Tuesday 2025-03-11 (the first week of US daylight time) and a Friday.
    for day in (dt.date(2025, 3, 11), dt.date(2025, 3, 14)):
        [request] = _requests(nightly, dt.datetime.combine(day, dt.time(18, 15), NY), dagster_instance)
        # One run over every ticker partition (prices, then features), tagged with its evening.
        assert request.tags[EVENING_TAG] == day.isoformat()
        assert (
            request.tags[ASSET_PARTITION_RANGE_START_TAG],
            request.tags[ASSET_PARTITION_RANGE_END_TAG],
        ) == (
            keys[0],
            keys[-1],
        )
        assert request.run_key == f"nightly:{day.isoformat()}"


def test_nightly_puts_features_between_prices_and_snapshots():
    from ldtm_dagster import defs

    def keys(name):
        return {k.to_user_string() for k in defs.resolve_job_def(name).asset_layer.selected_asset_keys}

    assert keys("nightly_market_job") == {"prices", "features"}
    assert keys("nightly_job") == {"snapshots", "fillbacks", "leaderboard", "signal_performance"}
    assert keys("retrain_job") == {"features", "checkpoints", "backtests"}
    assert defs.resolve_job_def("nightly_job").tags.get("ldtm/gpu") == "true"


def test_weekly_retrain_is_one_range_run_over_every_ticker(dagster_instance):
    assert weekly_retrain.execution_timezone == "America/New_York"
    saturday = dt.datetime(2025, 3, 15, 2, 0, tzinfo=NY)
    assert saturday.weekday() == 5
    [request] = _requests(weekly_retrain, saturday, dagster_instance)
    keys = ticker_partitions.get_partition_keys()
    assert request.tags[ASSET_PARTITION_RANGE_START_TAG] == keys[0]
    assert request.tags[ASSET_PARTITION_RANGE_END_TAG] == keys[-1]
    assert request.partition_key is None
    assert weekly_retrain.job_name == "retrain_job"
    # A new key each week, so the daemon never drops a week as a duplicate.
    [next_week] = _requests(weekly_retrain, saturday + dt.timedelta(days=7), dagster_instance)
    assert next_week.run_key != request.run_key


def test_the_nightly_time_is_a_setting(monkeypatch):
    """LDTM_NIGHTLY_TIME moves the schedule and the evening partitions together (read when the code
    location loads, as the universe is)."""
    import importlib

    from ldtm_dagster import partitions, schedules

    monkeypatch.setenv("LDTM_NIGHTLY_TIME", "17:45")
    try:
        importlib.reload(partitions)
        importlib.reload(schedules)
        crons = (schedules.nightly.cron_schedule, partitions.evening_partitions.cron_schedule)
    finally:
        monkeypatch.delenv("LDTM_NIGHTLY_TIME")
        importlib.reload(partitions)
        importlib.reload(schedules)
    assert crons == ("45 17 * * 1-5", "45 17 * * 1-5")
    assert schedules.nightly.cron_schedule == "15 18 * * 1-5"


@pytest.mark.parametrize("raw", ["15:30", "21:30", "17:45:30", "17:45+01:00", "6pm"])
def test_a_nightly_time_before_the_close_after_the_deadline_or_not_a_time_is_refused(monkeypatch, raw):
    from ldtm_core.errors import ConfigError
    from ldtm_dagster.partitions import nightly_time

    monkeypatch.setenv("LDTM_NIGHTLY_TIME", raw)
    with pytest.raises(ConfigError, match="LDTM_NIGHTLY_TIME"):
        nightly_time()
