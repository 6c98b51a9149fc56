"""The `recipe_fits` asset: a global recipe fitted once for the universe per (recipe, week) partition, on
prices up to the Friday its week ends on, a candidate per ticker (the loop: test_recipe_loop.py)."""

from __future__ import annotations

import datetime as dt

from dagster import AssetKey, materialize
from ldtm_dagster_helpers import tiny_resources

from ldtm_core.data.ingest import ingest_frame
from ldtm_core.data.synthetic_market import generate
from ldtm_core.learning.recipes import global_recipes
from ldtm_core.learning.registry import list_models
from ldtm_core.migrate import upgrade
from ldtm_dagster import defs
from ldtm_dagster.assets import recipe_fits
from ldtm_dagster.partitions import recipe_and_as_of, recipe_week_key, recipe_week_partitions

WEEK = "2024-01-06"  # the first week: its fit reads prices up to Friday 2024-01-12


def test_recipe_fits_trains_the_universe_once_for_its_week_and_registers_a_candidate_per_ticker(tmp_path):
    url = f"sqlite:///{tmp_path / 'ldtm.db'}"
    engine = upgrade(url)
    ingest_frame(engine, generate(["AAPL", "NVDA"], "2022-01-03", "2024-03-28", seed=7), "synthetic")
    result = materialize(
        [recipe_fits],
        partition_key=recipe_week_key("lightgbm", WEEK),
        resources=tiny_resources(tmp_path / "home", url, universe="AAPL,NVDA"),
        run_config={"ops": {"recipe_fits": {"config": {"set": ["n_estimators=20"]}}}},
    )
    assert result.success
    meta = result.asset_materializations_for_node("recipe_fits")[0].metadata
    assert (
        meta["trained"].value == 2 and meta["recipe"].value == "lightgbm" and meta["source"].value == "ldtm"
    )
    assert meta["as_of"].value == "2024-01-12" and meta["pool"].value == "AAPL, NVDA"
    assert meta["settings"].value == {"from": "the run's config", "n_estimators": 20}
    models = list_models(engine)
    assert {m.ticker for m in models} == {"AAPL", "NVDA"} and {m.recipe for m in models} == {"lightgbm"}
    assert len({m.checkpoint_path for m in models}) == 1  # one fit
    assert {str(m.trained_on_date) <= "2024-01-12" for m in models} == {True}  # nothing after its week


def test_a_bad_setting_fails_the_step_by_name_before_reading_anything(tmp_path):
    url = f"sqlite:///{tmp_path / 'ldtm.db'}"
    upgrade(url)
    result = materialize(
        [recipe_fits],
        partition_key=recipe_week_key("ridge", WEEK),
        resources=tiny_resources(tmp_path / "home", url, universe="AAPL"),
        run_config={"ops": {"recipe_fits": {"config": {"set": ["alpha=-1"]}}}},
        raise_on_error=False,
    )
    assert not result.success
    failure = result.failure_data_for_node("recipe_fits").error
    assert "ridge: --set alpha must be in [0, 1e+12]" in str(failure.message)


def test_the_recipe_loop_is_partitioned_by_recipe_and_week_in_its_own_group():
    graph = defs.resolve_asset_graph()
    for key in ("recipe_fits", "recipe_backtests", "recipe_decisions"):
        node = graph.get(AssetKey(key))
        assert node.partitions_def == recipe_week_partitions and node.group_name == "recipes"
    assert graph.get(AssetKey("recipe_backtests")).parent_keys == {AssetKey("recipe_fits")}
    assert graph.get(AssetKey("recipe_decisions")).parent_keys == {AssetKey("recipe_backtests")}
    recipes = recipe_week_partitions.get_partitions_def_for_dimension("recipe").get_partition_keys()
    assert recipes == global_recipes() and "lstm" not in recipes  # the LSTM's loop is per ticker
    listed = recipe_fits.specs_by_key[AssetKey("recipe_fits")].metadata["recipes"].records
    assert [(r.data["recipe"], r.data["source"]) for r in listed] == [(r, "ldtm") for r in recipes]
    assert recipe_and_as_of(recipe_week_key("ridge", "2026-11-28")) == ("ridge", dt.date(2026, 12, 4))


def test_an_active_recipe_model_is_not_exported_to_onnx_and_says_why(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from ldtm_core.cli import app
    from ldtm_core.learning.registry import promote
    from ldtm_dagster.assets import onnx_exports

    url = f"sqlite:///{tmp_path / 'ldtm.db'}"
    engine = upgrade(url)
    ingest_frame(engine, generate(["AAPL"], "2022-01-03", "2023-12-29", seed=7), "synthetic")
    resources = tiny_resources(tmp_path / "home", url, universe="AAPL")
    assert materialize(
        [recipe_fits], partition_key=recipe_week_key("ridge", WEEK), resources=resources
    ).success
    promote(engine, list_models(engine)[0].id, reason="test")

    result = materialize([onnx_exports], partition_key="AAPL", resources=resources)
    assert result.success
    summary = result.asset_materializations_for_node("onnx_exports")[0].metadata["summary"].value
    assert summary.records[0].data["status"] == "not exported: recipe ridge has no ONNX export"
    monkeypatch.setenv("LDTM_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("LDTM_DATABASE_URL", url)
    out = CliRunner().invoke(app, ["export", "onnx", "--ticker", "AAPL"])
    assert out.exit_code != 0 and "is a ridge recipe: ONNX export is for the lstm recipe" in out.output
