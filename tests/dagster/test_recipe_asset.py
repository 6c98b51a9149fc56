"""The `recipe_fits` asset: a global recipe fitted once (one step, not partitioned) for the universe, a
candidate per ticker; the ticker partitions of `backtests` and `promotions` then judge each candidate."""

from __future__ import annotations

from dagster import AssetKey, materialize
from ldtm_dagster_helpers import tiny_resources

from ldtm_core.data.ingest import ingest_frame
from ldtm_core.data.synthetic_market import generate
from ldtm_core.learning.registry import list_models
from ldtm_core.migrate import upgrade
from ldtm_dagster import defs
from ldtm_dagster.assets import recipe_fits


def test_recipe_fits_trains_the_universe_once_and_registers_a_candidate_per_ticker(tmp_path):
    url = f"sqlite:///{tmp_path / 'ldtm.db'}"
    engine = upgrade(url)
    ingest_frame(engine, generate(["AAPL", "NVDA"], "2022-01-03", "2023-12-29", seed=7), "synthetic")
    result = materialize(
        [recipe_fits],
        resources=tiny_resources(tmp_path / "home", url, universe="AAPL,NVDA"),
        run_config={"ops": {"recipe_fits": {"config": {"recipe": "lightgbm", "set": ["n_estimators=20"]}}}},
    )
    assert result.success
    meta = result.asset_materializations_for_node("recipe_fits")[0].metadata
    assert meta["trained"].value == 2 and meta["recipe"].value == "lightgbm"
    models = list_models(engine)
    assert {m.ticker for m in models} == {"AAPL", "NVDA"} and {m.recipe for m in models} == {"lightgbm"}
    assert len({m.checkpoint_path for m in models}) == 1  # one fit


def test_a_bad_recipe_fails_the_step_by_name_before_reading_anything(tmp_path):
    url = f"sqlite:///{tmp_path / 'ldtm.db'}"
    upgrade(url)
    result = materialize(
        [recipe_fits],
        resources=tiny_resources(tmp_path / "home", url, universe="AAPL"),
        run_config={"ops": {"recipe_fits": {"config": {"recipe": "xgboost"}}}},
        raise_on_error=False,
    )
    assert not result.success
    failure = result.failure_data_for_node("recipe_fits").error
    assert "recipe 'xgboost' is unknown" in str(failure.message)


def test_recipe_fits_is_one_unpartitioned_step_in_the_models_group():
    graph = defs.resolve_asset_graph()
    node = graph.get(AssetKey("recipe_fits"))
    assert node.partitions_def is None and node.group_name == "models"


def test_an_active_recipe_model_is_not_exported_to_onnx_and_says_why(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from ldtm_core.cli import app
    from ldtm_core.learning.registry import promote
    from ldtm_dagster.assets import onnx_exports

    url = f"sqlite:///{tmp_path / 'ldtm.db'}"
    engine = upgrade(url)
    ingest_frame(engine, generate(["AAPL"], "2022-01-03", "2023-12-29", seed=7), "synthetic")
    resources = tiny_resources(tmp_path / "home", url, universe="AAPL")
    assert materialize([recipe_fits], resources=resources).success
    promote(engine, list_models(engine)[0].id, reason="test")

    result = materialize([onnx_exports], partition_key="AAPL", resources=resources)
    assert result.success
    summary = result.asset_materializations_for_node("onnx_exports")[0].metadata["summary"].value
    assert summary.records[0].data["status"] == "not exported: recipe ridge has no ONNX export"
    monkeypatch.setenv("LDTM_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("LDTM_DATABASE_URL", url)
    out = CliRunner().invoke(app, ["export", "onnx", "--ticker", "AAPL"])
    assert out.exit_code != 0 and "is a ridge recipe: ONNX export is for the lstm recipe" in out.output
