"""Schedules: the nightly evening run, the weekly LSTM retrain and the weekly global-recipe refits, in
market time (America/New_York)."""

import datetime as dt
from zoneinfo import ZoneInfo

from dagster import (
    DefaultScheduleStatus,
    RunRequest,
    ScheduleEvaluationContext,
    SkipReason,
    schedule,
)

from ldtm_core.learning.recipes import challenger_recipes, global_recipes
from ldtm_core.learning.registry import serving_models

from .gpu_pool import GPU_RUN_TAGS
from .jobs import nightly_market_job, recipe_refit_job, retrain_job
from .partitions import EVENING_TAG, MARKET_TZ, NIGHTLY_CRON, range_tags, recipe_week_key, ticker_partitions
from .resources import AppDatabase, ArtifactStore


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


def loop_recipes(engine, tickers: list[str]) -> list[str]:
    """The global recipes the weekly loop refits: every one serving a ticker (its champion, refitted with
    its own recipe) and every LDTM_CHALLENGER_RECIPES, in registry order."""
    serving = {m.recipe for m in serving_models(engine, tickers).values() if m.status == "active"}
    wanted = serving | set(challenger_recipes())
    return [r for r in global_recipes() if r in wanted]


@schedule(
    cron_schedule="30 2 * * 6",
    execution_timezone=MARKET_TZ,
    job=recipe_refit_job,
    default_status=DefaultScheduleStatus.RUNNING,
)
def weekly_recipe_refit(context: ScheduleEvaluationContext, store: ArtifactStore, database: AppDatabase):
    """Saturday 02:30: for the week that just ended, fit and backtest every global recipe serving a ticker
    and every LDTM_CHALLENGER_RECIPES (one run each); `recipe_decision_sensor` decides each as it lands.
    The LSTMs are retrained by `weekly_retrain` as before, so a recipe champion is challenged by both."""
    when = context.scheduled_execution_time.astimezone(ZoneInfo(MARKET_TZ)).date()
    week = (when - dt.timedelta(days=7)).isoformat()  # the Saturday the ended week began on
    recipes = loop_recipes(database.engine(store), store.tickers())
    if not recipes:
        return SkipReason("no global recipe serves a ticker and LDTM_CHALLENGER_RECIPES is empty")
    return [
        RunRequest(run_key=f"recipe_refit:{recipe}:{week}", partition_key=recipe_week_key(recipe, week))
        for recipe in recipes
    ]
