"""The code location loads, validates, and exposes the fixed asset keys, partitions and pools."""

from __future__ import annotations

import os
import subprocess
import sys

from dagster import AssetKey, Definitions
from ldtm_dagster_helpers import REPO

from ldtm_core.data.universe import load_universe
from ldtm_dagster import defs
from ldtm_dagster.partitions import evening_partitions, ticker_partitions

ASSET_KEYS = {
    "prices",
    "features",
    "checkpoints",
    "backtests",
    "promotions",
    "onnx_exports",
    "snapshots",
    "fillbacks",
    "leaderboard",
    "signal_performance",
    "submissions",
    "external_judgements",
    "hpo_studies",
    "recipe_fits",
    "recipe_backtests",
    "recipe_decisions",
}


def _graph():
    return defs.resolve_asset_graph()


def test_definitions_are_loadable_with_fixed_asset_keys():
    Definitions.validate_loadable(defs)
    keys = {k.to_user_string() for k in _graph().get_all_asset_keys()}
    assert keys == ASSET_KEYS


def test_ticker_partitions_follow_the_universe_and_gpu_steps_use_the_gpu_pool():
    graph = _graph()
    assert ticker_partitions.get_partition_keys() == load_universe(os.environ.get("LDTM_UNIVERSE") or "demo")
    for key in ("features", "checkpoints", "backtests", "promotions", "onnx_exports"):
        node = graph.get(AssetKey(key))
        assert node.partitions_def == ticker_partitions
        assert node.backfill_policy is not None and node.backfill_policy.max_partitions_per_run is None
    assert graph.get(AssetKey("snapshots")).partitions_def == evening_partitions
    pools = {k: _pools(graph.assets_def_for_key(AssetKey(k)).node_def) for k in ASSET_KEYS}
    assert {k for k, p in pools.items() if "gpu" in p} == {
        "checkpoints",
        "backtests",
        "snapshots",
        "hpo_studies",
    }
    # checkpoints is a graph: only its training steps hold gpu slots (one per training process).
    assert _pools(graph.assets_def_for_key(AssetKey("checkpoints")).node_def) == {"gpu"}
    ops = graph.assets_def_for_key(AssetKey("checkpoints")).node_def.node_defs
    assert {o.name for o in ops if o.pool == "gpu"} == {"train_checkpoint_chunk"}


def _pools(node_def) -> set:
    if hasattr(node_def, "node_defs"):  # a graph-backed asset: the pools of its ops
        return {p for d in node_def.node_defs for p in _pools(d)}
    return {node_def.pool} if node_def.pool else set()


def test_checks_cover_price_quality_snapshots_audit_and_leakage():
    checks = {(k.asset_key.to_user_string(), k.name) for k in _graph().asset_check_keys}
    assert {
        ("prices", "prices_ohlc_consistent"),
        ("prices", "prices_sessions_complete"),
        ("snapshots", "one_per_ticker"),
        ("snapshots", "audit_chain_intact"),
        ("snapshots", "chain_matches_dagster_anchors"),
        ("backtests", "no_leakage"),
        ("features", "features_current"),
        ("features", "features_finite"),
        ("features", "features_rsi_in_range"),
        ("features", "features_match_recomputation"),
    } <= checks


def test_lineage_runs_prices_features_models_and_features_snapshots():
    graph = _graph()

    def parents(key: str) -> set[str]:
        return {k.to_user_string() for k in graph.get(AssetKey(key)).parent_keys}

    assert parents("features") == {"prices"}
    assert parents("checkpoints") == {"features"}
    assert parents("backtests") == {"checkpoints", "features"}
    assert parents("promotions") == {"backtests"}
    assert {"features", "promotions"} <= parents("snapshots")


def test_full_universe_gives_103_checkpoint_partitions():
    code = "from ldtm_dagster.partitions import ticker_partitions as p; print(len(p.get_partition_keys()))"
    env = {**os.environ, "LDTM_UNIVERSE": "full"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "103"


def test_dagster_definitions_validate_passes_from_workspace_yaml(tmp_path):
    env = {**os.environ, "DAGSTER_HOME": str(tmp_path)}
    (tmp_path / "dagster.yaml").write_text((REPO / "dagster.yaml").read_text())
    dagster = os.path.join(os.path.dirname(sys.executable), "dagster")
    out = subprocess.run(
        [dagster, "definitions", "validate", "-w", "workspace.yaml"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "passed validation" in out.stdout + out.stderr


def test_an_automatic_retry_of_a_killed_retrain_replans_instead_of_reusing_the_dead_plan():
    """run_retries re-executes FROM_FAILURE unless the run says otherwise; that reuses the killed run's
    plan and trains nothing (measured in the compose stack). Runs of the chunked GPU jobs carry
    ALL_STEPS, so the planning step runs again and skips the tickers already trained."""
    from dagster import DagsterInstance
    from dagster._core.execution.plan.resume_retry import ReexecutionStrategy
    from dagster._daemon.auto_run_reexecution.auto_run_reexecution import get_reexecution_strategy

    with DagsterInstance.ephemeral() as instance:
        for name in ("retrain_job", "backtests_job"):
            job = defs.resolve_job_def(name)
            run = instance.create_run_for_job(job, tags={**job.tags, "dagster/partition": "AAPL"})
            assert get_reexecution_strategy(run, instance) == ReexecutionStrategy.ALL_STEPS, name


def test_the_code_location_marks_its_processes_as_the_gpu_pool_and_a_deployment_value_wins(monkeypatch):
    from ldtm_core.learning.gpu_slots import ENV_POOL_ID
    from ldtm_dagster.gpu_pool import GPU_POOL, mark_pool_processes

    assert os.environ[ENV_POOL_ID].startswith(f"{GPU_POOL}@")  # set when `defs` was loaded above
    monkeypatch.setenv(ENV_POOL_ID, "gpu@cluster-a")
    assert mark_pool_processes() == "gpu@cluster-a"
    monkeypatch.delenv(ENV_POOL_ID)
    monkeypatch.setenv("DAGSTER_HOME", "/srv/dagster")
    assert mark_pool_processes() == "gpu@/srv/dagster" == os.environ[ENV_POOL_ID]
