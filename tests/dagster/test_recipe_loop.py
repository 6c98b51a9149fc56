"""A non-LSTM champion run from Dagster alone (issue 59), on a real instance: the weekly schedule fits
and backtests every recipe serving a ticker and every configured challenger, the sensor launches the
universe decision when a recipe's backtests land, the decision serves the winner, and the next week
refits the champion with its own recipe and settings."""

from __future__ import annotations

import datetime as dt
from zoneinfo import ZoneInfo

import pytest
from dagster import build_schedule_context, build_sensor_context, materialize
from ldtm_dagster_helpers import tiny_resources

from ldtm_core.data.ingest import ingest_frame
from ldtm_core.data.synthetic_market import generate
from ldtm_core.learning.registry import active_model, list_models, promote
from ldtm_core.migrate import upgrade
from ldtm_dagster import defs
from ldtm_dagster.assets import promotions, recipe_backtests, recipe_decisions, recipe_fits
from ldtm_dagster.partitions import recipe_week_key
from ldtm_dagster.schedules import weekly_recipe_refit
from ldtm_dagster.sensors import recipe_decision_sensor

NY = ZoneInfo("America/New_York")
TICKERS = "AAPL,NVDA"
FOLDS = {"ops": {"recipe_backtests": {"config": {"folds": 2}}}}


@pytest.fixture
def world(tmp_path, monkeypatch):
    url = f"sqlite:///{tmp_path / 'ldtm.db'}"
    engine = upgrade(url)
    ingest_frame(engine, generate(["AAPL", "NVDA"], "2022-01-03", "2024-03-28", seed=7), "synthetic")
    monkeypatch.setenv("LDTM_GATE_MIN_ROWS", "20")
    return engine, tiny_resources(tmp_path / "home", url, universe=TICKERS)


def _schedule(instance, resources, saturday: dt.date):
    context = build_schedule_context(
        instance=instance,
        scheduled_execution_time=dt.datetime.combine(saturday, dt.time(2, 30), NY),
        resources={k: resources[k] for k in ("store", "database")},
        repository_def=defs.get_repository_def(),  # resolves the (recipe, week) partition keys
    )
    return weekly_recipe_refit.evaluate_tick(context)


def _decide(instance, resources, cursor):
    result = recipe_decision_sensor(build_sensor_context(instance=instance, cursor=cursor))
    for request in result.run_requests:
        assert materialize(
            [recipe_decisions], partition_key=request.partition_key, instance=instance, resources=resources
        ).success
    return result


def test_the_weekly_recipe_loop_from_the_schedule_and_the_sensor(world, dagster_instance, monkeypatch):
    engine, resources = world
    # Nothing serves and no challenger is configured: the schedule has nothing to fit.
    nothing = _schedule(dagster_instance, resources, dt.date(2024, 1, 13))
    assert not nothing.run_requests and "no global recipe serves a ticker" in nothing.skip_message

    monkeypatch.setenv("LDTM_CHALLENGER_RECIPES", "ridge")
    [request] = _schedule(dagster_instance, resources, dt.date(2024, 1, 13)).run_requests
    assert request.partition_key == recipe_week_key("ridge", "2024-01-06")
    assert request.run_key == "recipe_refit:ridge:2024-01-06"
    run = materialize(
        [recipe_fits, recipe_backtests],
        partition_key=request.partition_key,
        instance=dagster_instance,
        resources=resources,
        run_config={"ops": {"recipe_fits": {"config": {"set": ["alpha=2.5"]}}, **FOLDS["ops"]}},
    )
    assert run.success
    assert run.asset_materializations_for_node("recipe_backtests")[0].metadata["ok"].value == 2

    # The backtests landed: the sensor asks for the decision once, for that partition.
    first = _decide(dagster_instance, resources, None)
    assert [r.partition_key for r in first.run_requests] == [request.partition_key]
    decided = dagster_instance.fetch_materializations(recipe_decisions.key, limit=1).records[0]
    meta = decided.asset_materialization.metadata
    assert (
        "universe verdict on recipe ridge" in meta["verdicts"].value
        and "first deployment" in meta["verdicts"].value
    )
    assert {r.data["ticker"] for r in meta["serving"].value.records} == {"AAPL", "NVDA"}
    assert not _decide(dagster_instance, resources, first.cursor).run_requests  # nothing new landed
    # The per-ticker gate leaves a global candidate to the universe policy.
    gated = materialize([promotions], partition_key="NVDA", instance=dagster_instance, resources=resources)
    [row] = gated.asset_materializations_for_node("promotions")[0].metadata["summary"].value.records
    assert row.data["decision"] in ("universe policy", "no candidate")

    # Ridge serves AAPL (a decision of the verdict, or of an operator): next week the schedule refits the
    # champion's recipe with its own settings, and the configured challenger beside it.
    if active_model(engine, "AAPL") is None:
        promote(engine, next(m.id for m in list_models(engine, "AAPL")), reason="operator")
    monkeypatch.setenv("LDTM_CHALLENGER_RECIPES", "lightgbm")
    requests = _schedule(dagster_instance, resources, dt.date(2024, 1, 20)).run_requests
    assert [r.partition_key for r in requests] == [
        recipe_week_key("ridge", "2024-01-13"),
        recipe_week_key("lightgbm", "2024-01-13"),
    ]
    refit = materialize(
        [recipe_fits], partition_key=requests[0].partition_key, instance=dagster_instance, resources=resources
    )
    settings = refit.asset_materializations_for_node("recipe_fits")[0].metadata["settings"].value
    assert settings["from"] == "its serving model's" and settings["alpha"] == 2.5
