"""A single-run backfill of several `checkpoints` partitions with the documented CLI command:
one run trains all of them and records a materialization per partition."""

import os
import subprocess
import sys

import pytest
from dagster import AssetKey, DagsterInstance
from dagster._core.storage.tags import ASSET_PARTITION_RANGE_END_TAG, ASSET_PARTITION_RANGE_START_TAG
from ldtm_dagster_helpers import REPO, dagster_cli_env
from sqlalchemy import select

from ldtm_core.data.ingest import ingest_synthetic
from ldtm_core.db import get_engine
from ldtm_core.schema import model_registry


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_cli_partition_range_trains_three_tickers_in_one_run(sqlite_url, tmp_path):
    engine = get_engine(sqlite_url)
    ingest_synthetic(engine, ["AAPL", "NVDA", "TSLA", "QQQ"], "2023-01-03", "2024-06-28", seed=0)
    env = dagster_cli_env(tmp_path, database_url=sqlite_url, universe="demo", profile="demo", max_epochs=1)
    dagster = os.path.join(os.path.dirname(sys.executable), "dagster")
    cmd = [dagster, "asset", "materialize", "-m", "ldtm_dagster", "--select", "checkpoints"]
    out = subprocess.run(
        [*cmd, "--partition-range", "AAPL...TSLA"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]

    instance = DagsterInstance.from_config(env["DAGSTER_HOME"])
    try:
        runs = instance.get_runs()
        assert len(runs) == 1
        assert runs[0].tags[ASSET_PARTITION_RANGE_START_TAG] == "AAPL"
        assert runs[0].tags[ASSET_PARTITION_RANGE_END_TAG] == "TSLA"
        assert instance.get_materialized_partitions(AssetKey("checkpoints")) == {"AAPL", "NVDA", "TSLA"}
        record = instance.fetch_materializations(AssetKey("checkpoints"), limit=1).records[0]
        summary = record.asset_materialization.metadata["summary"].value.records
        assert sorted(r.data["ticker"] for r in summary) == ["AAPL", "NVDA", "TSLA"]
    finally:
        instance.dispose()
    with engine.connect() as conn:
        rows = conn.execute(
            select(model_registry.c.ticker, model_registry.c.status, model_registry.c.epochs)
        ).all()
    assert sorted(r.ticker for r in rows) == ["AAPL", "NVDA", "TSLA"]  # QQQ was outside the range
    assert {(r.status, r.epochs) for r in rows} == {("candidate", 1)}
