"""The `hpo_studies` asset: one study per ticker partition, in the gpu pool, outside the weekly job."""

from __future__ import annotations

from dagster import AssetKey, materialize
from ldtm_dagster_helpers import tiny_resources

from ldtm_core.data.ingest import ingest_frame
from ldtm_core.data.synthetic_market import generate
from ldtm_core.learning import tuning_store
from ldtm_core.migrate import upgrade
from ldtm_dagster import defs
from ldtm_dagster.assets import hpo_studies

FIXED = ["hidden_size=16", "num_layers=1", "head_hidden=8", "patience=2"]


def test_hpo_studies_materialises_a_ticker_study_with_its_metadata(tmp_path):
    url = f"sqlite:///{tmp_path / 'ldtm.db'}"
    ingest_frame(upgrade(url), generate(["AAPL"], "2021-01-04", "2023-12-29", seed=7), "synthetic")
    result = materialize(
        [hpo_studies],
        partition_key="AAPL",
        resources=tiny_resources(tmp_path / "home", url),  # TrainingProfile max_epochs=1 caps each trial
        run_config={"ops": {"hpo_studies": {"config": {"trials": 2, "fixed": FIXED, "seed": 1}}}},
    )
    assert result.success
    meta = result.asset_materializations_for_node("hpo_studies")[0].metadata
    assert meta["trials"].value == 2 and meta["pruned"].value == 0
    assert meta["best_value"].value > 0
    settings = meta["settings"].value["AAPL"]
    assert {"window", "dropout", "lr", "batch_size", "weight_decay"} == set(settings)
    best = tuning_store.list_studies(url)
    assert [s.name for s in best] == ["ldtm:AAPL"] and best[0].best_config["max_epochs"] == 1
    tuning_store._STORAGES.pop(url, None)


def test_hpo_studies_is_in_the_gpu_pool_and_no_scheduled_job():
    graph = defs.resolve_asset_graph()
    assert graph.assets_def_for_key(AssetKey("hpo_studies")).node_def.pool == "gpu"
    for job in defs.resolve_all_job_defs():
        if not job.name.startswith("__"):
            assert AssetKey("hpo_studies") not in job.asset_layer.selected_asset_keys, job.name


def test_training_profile_accepts_tuned_and_refuses_unknown_profiles():
    from dagster import Failure, build_init_resource_context

    from ldtm_core.learning.model import get_profile
    from ldtm_dagster.resources import TrainingProfile

    assert TrainingProfile(profile="tuned", max_epochs=3).config() == get_profile("reference", max_epochs=3)
    try:
        TrainingProfile(profile="tunned").setup_for_execution(build_init_resource_context())
    except Failure as exc:
        assert "tunned" in str(exc)
    else:
        raise AssertionError("an unknown profile must fail the run")


def test_checkpoints_asset_trains_each_ticker_with_its_tuned_settings(tmp_path):
    """`LDTM_PROFILE=tuned`: the graph-backed checkpoints asset trains AAPL with its study's best trial
    and NVDA (no study) with `reference`, and records which settings each model used."""
    from dagster import AssetSelection, instance_for_test
    from dagster._core.storage.tags import ASSET_PARTITION_RANGE_END_TAG, ASSET_PARTITION_RANGE_START_TAG

    from ldtm_core.learning.registry import newest_candidate
    from ldtm_dagster.assets import checkpoints, features, prices
    from ldtm_dagster.resources import TrainingProfile

    url = f"sqlite:///{tmp_path / 'ldtm.db'}"
    engine = upgrade(url)
    ingest_frame(engine, generate(["AAPL", "NVDA"], "2021-01-04", "2023-12-29", seed=7), "synthetic")
    resources = tiny_resources(tmp_path / "home", url)
    assert materialize(
        [hpo_studies],
        partition_key="AAPL",
        resources=resources,
        run_config={"ops": {"hpo_studies": {"config": {"trials": 2, "fixed": FIXED, "seed": 1}}}},
    ).success
    best = tuning_store.list_studies(url)[0].best_config
    resources["training"] = TrainingProfile(profile="tuned", max_epochs=1)
    with instance_for_test() as instance:
        result = materialize(
            [prices, features, checkpoints],
            selection=AssetSelection.assets(checkpoints),
            instance=instance,
            resources=resources,
            tags={ASSET_PARTITION_RANGE_START_TAG: "AAPL", ASSET_PARTITION_RANGE_END_TAG: "NVDA"},
        )
        assert result.success
        summary = instance.fetch_materializations(AssetKey("checkpoints"), limit=1).records[0]
        rows = {
            r.data["ticker"]: r.data for r in summary.asset_materialization.metadata["summary"].value.records
        }
    assert rows["AAPL"]["settings"] == "tuned" and rows["NVDA"]["settings"] == "reference"
    aapl = newest_candidate(engine, "AAPL")
    assert aapl.profile == "tuned" and aapl.config.window == best["window"] and aapl.config.lr == best["lr"]
    assert newest_candidate(engine, "NVDA").profile == "reference"
    tuning_store._STORAGES.pop(url, None)


def test_hpo_studies_skips_a_late_listing_without_failing_the_others(tmp_path):
    """A ticker listed months ago (the demo's FER) cannot hold the backtest's quarter-anchored folds, so no
    hold-out exists for a study: it is skipped with its reason, and AAPL's study in the same run lands."""
    from ldtm_dagster.partitions import range_tags

    url = f"sqlite:///{tmp_path / 'ldtm.db'}"
    engine = upgrade(url)
    ingest_frame(engine, generate(["AAPL"], "2021-01-04", "2023-12-29", seed=7), "synthetic")
    ingest_frame(engine, generate(["NVDA"], "2023-07-03", "2023-12-29", seed=7), "synthetic")
    result = materialize(
        [hpo_studies],
        tags=range_tags(["AAPL", "NVDA"]),
        resources=tiny_resources(tmp_path / "home", url),
        run_config={"ops": {"hpo_studies": {"config": {"trials": 1, "fixed": FIXED, "seed": 1}}}},
    )
    assert result.success
    meta = result.asset_materializations_for_node("hpo_studies")[0].metadata
    assert set(meta["settings"].value) == {"AAPL"}
    assert "NVDA" in meta["skipped"].value and "cannot hold" in meta["skipped"].value["NVDA"]
    tuning_store._STORAGES.pop(url, None)
