"""`signal_performance` (issue 30): in the nightly job after fillbacks; its metadata carries the summary
table, the IC, the headline figures and an equity-curve PNG, equal to ldtm_core's report."""

from __future__ import annotations

import pytest
from dagster import AssetKey, materialize
from ldtm_dagster_helpers import tiny_resources
from signals_helpers import seed_market

from ldtm_core.accountability.signals.signals import signal_report
from ldtm_core.db import get_engine
from ldtm_dagster import assets, defs


def test_signal_performance_runs_after_fillbacks_in_the_nightly_job():
    job = defs.resolve_job_def("nightly_job")
    keys = {k.to_user_string() for k in job.asset_layer.executable_asset_keys}
    assert "signal_performance" in keys
    graph = defs.resolve_asset_graph()
    assert AssetKey("fillbacks") in graph.get(AssetKey("signal_performance")).parent_keys


def test_signal_performance_metadata(dagster_instance, db_url, tmp_path):
    engine = get_engine(db_url)
    seed_market(engine, ["AAPL", "MSFT", "NVDA", "AMZN", "JPM"], "2023-01-03", "2023-04-28", skill=0.2)
    result = materialize(
        [assets.signal_performance],
        instance=dagster_instance,
        resources=tiny_resources(tmp_path / "home", db_url, universe="AAPL,MSFT,NVDA,AMZN,JPM"),
    )
    assert result.success
    [mat] = result.asset_materializations_for_node("signal_performance")
    meta = mat.metadata
    want = signal_report(engine)
    assert meta["evenings"].value == len(want.evenings) > 50
    assert meta["headline"].value == want.headline()
    assert meta["long_short_sharpe_net"].value == pytest.approx(
        want.summary()
        .set_index(["portfolio", "basis"])
        .loc[("long bullish / short bearish", "net"), "sharpe"]
    )
    # Three forecast-time horizons and the next-day prediction against the return the books held.
    assert len(meta["summary"].value.records) == 5 and len(meta["ic"].value.records) == 4
    assert meta["execution"].value.startswith("next_close: enter at the close of the session after")
    assert meta["mean_ic_held"].value == pytest.approx(
        want.ic.set_index("horizon").loc["held: next_close", "mean_ic"]
    )
    residual = want.residual.set_index("horizon").loc["next_day"]
    assert meta["residual_ic_next_day"].value == pytest.approx(residual["mean_ic_sector"])
    assert meta["churn_next_day"].value == pytest.approx(residual["mean_churn"])
    assert "data:image/png;base64," in meta["equity_curve"].value


def test_signal_performance_on_an_empty_database(dagster_instance, db_url, tmp_path):
    result = materialize(
        [assets.signal_performance],
        instance=dagster_instance,
        resources=tiny_resources(tmp_path / "home", db_url),
    )
    assert result.success
    [mat] = result.asset_materializations_for_node("signal_performance")
    assert mat.metadata["evenings"].value == 0 and "equity_curve" not in mat.metadata
