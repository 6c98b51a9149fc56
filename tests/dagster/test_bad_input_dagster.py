"""Dagster runs that used to accept what they should refuse, or fail with a traceback (issue 28 items 13-14)."""

from __future__ import annotations

import pytest
from dagster import DagsterInvalidConfigError, materialize

from ldtm_dagster.assets.accountability import snapshots
from ldtm_dagster.demo import demo_resources


def test_unknown_config_keys_on_the_snapshots_step_are_refused(ldtm_env):
    run_config = {"ops": {"snapshots": {"config": {"tickers": ["AAPL"]}}}}
    with pytest.raises(DagsterInvalidConfigError, match='unexpected config entry "tickers"'):
        materialize(
            [snapshots], resources=demo_resources(), run_config=run_config, partition_key="2024-03-28"
        )


def test_nightly_job_without_a_partition_says_how_to_pass_one(dagster_instance, sqlite_url, tmp_path):
    """`dagster job execute -j nightly_job` without a partition: one line naming the option, not
    "Cannot access partition_key for a non-partitioned run" under a traceback."""
    from ldtm_dagster_helpers import tiny_resources

    from ldtm_dagster import defs

    result = defs.resolve_job_def("nightly_job").execute_in_process(
        instance=dagster_instance,
        resources=tiny_resources(tmp_path / "home", sqlite_url),
        raise_on_error=False,
    )
    assert not result.success
    [failure] = [e for e in result.all_events if e.is_step_failure]
    error = failure.step_failure_data.error
    assert "dagster/partition" in error.message and "nightly_job" in error.message, error.message
    assert "non-partitioned" not in error.message
    assert error.cls_name == "Failure"


def test_a_missing_universe_file_while_dagster_loads_the_code_is_one_line(tmp_path):
    import os
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    env = {**os.environ, "LDTM_UNIVERSE": str(tmp_path / "nope.txt"), "DAGSTER_HOME": str(tmp_path)}
    env["PYTHONPATH"] = str(repo)
    dagster = Path(sys.executable).with_name("dagster")
    out = subprocess.run(
        [str(dagster), "job", "execute", "-m", "ldtm_dagster", "-j", "nightly_job"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr, out.stderr
    errors = [line for line in out.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, out.stderr
    assert "LDTM_UNIVERSE" in errors[0] and "nope.txt" in errors[0] and "does not exist" in errors[0]


def test_the_prices_asset_warns_of_a_hole_in_what_it_stored(dagster_instance, sqlite_url, tmp_path):
    """Issue 28 item 12 in the Dagster shell: the `prices` step's log and metadata name the hole."""
    import pandas as pd
    from dagster import AssetKey
    from ldtm_dagster_helpers import tiny_resources

    from ldtm_core.data.synthetic_market import generate
    from ldtm_dagster import assets

    drop = tmp_path / "drop"
    drop.mkdir()
    early = generate(["AAPL"], "2024-01-02", "2024-02-29", seed=2)
    late = generate(["AAPL"], "2024-05-01", "2024-06-14", seed=2)
    pd.concat([early, late]).to_csv(drop / "aapl.csv", index=False)
    result = materialize(
        [assets.prices],
        instance=dagster_instance,
        resources=tiny_resources(tmp_path / "home", sqlite_url),
        run_config={"ops": {"prices": {"config": {"source": f"files:{drop}", "end": "2024-06-14"}}}},
    )
    assert result.success
    meta = (
        dagster_instance.fetch_materializations(AssetKey("prices"), limit=1)
        .records[0]
        .asset_materialization.metadata
    )
    [gap] = meta["price_gaps"].value
    assert "AAPL" in gap and "2024-02-29" in gap and "2024-05-01" in gap and "sessions" in gap
    warnings = [
        e.message
        for e in dagster_instance.all_logs(result.run_id)
        if e.level >= 30 and "price gap" in e.message
    ]
    assert len(warnings) == 1, warnings
