"""`leaderboard_decay` (issue 21): WARN naming the decaying ticker on a planted decay, each alarm posted to
the webhook once, and a pass where the active models hold what they promised."""

from __future__ import annotations

from accountability_helpers import make_settings
from dagster import AssetCheckKey, AssetKey, materialize
from decay_helpers import planted_model, planted_record
from ldtm_dagster_helpers import tiny_resources

from ldtm_core.db import get_engine
from ldtm_dagster import assets, checks

KEY = AssetCheckKey(AssetKey("leaderboard"), "leaderboard_decay")


def _run(instance, tmp_path, url, universe):
    result = materialize(
        [assets.leaderboard, checks.leaderboard_decay],
        instance=instance,
        resources=tiny_resources(tmp_path / "home", url, universe=universe),
    )
    assert result.success  # a warning never fails the nightly
    [check] = result.get_asset_check_evaluations()
    assert check.asset_check_key == KEY
    return check


def test_decay_warns_names_the_ticker_posts_once_and_passes_when_stable(
    dagster_instance, sqlite_url, tmp_path, webhook
):
    engine = get_engine(sqlite_url)
    settings = make_settings(tmp_path, sqlite_url)
    decaying = planted_model(engine, settings, "AAPL", seed=0)
    stable = planted_model(engine, settings, "NVDA", seed=1)
    planted_record(engine, "AAPL", decaying, n=400, decay_at=200, seed=1)
    planted_record(engine, "NVDA", stable, n=400, seed=2)

    check = _run(dagster_instance, tmp_path, sqlite_url, "AAPL,NVDA")
    assert not check.passed and check.severity.value == "WARN"
    assert check.metadata["decaying"].value == ["AAPL"] and check.metadata["checked"].value == 2
    rows = {r.data["ticker"]: r.data for r in check.metadata["table"].value.records}
    assert rows["AAPL"]["decaying"] and not rows["NVDA"]["decaying"]
    assert rows["AAPL"]["live_n"] > 200 and abs(rows["AAPL"]["promised_accuracy"] - 0.60) < 1e-9
    assert rows["AAPL"]["signals"] >= 1 and rows["AAPL"]["alarm_since"] == rows["AAPL"]["last_signal"]
    assert rows["AAPL"]["threshold"] > rows["AAPL"]["cusum"] >= 0  # restarted at 0 after the signal
    assert {"psi_max", "psi_feature", "live_accuracy", "alarm_since"} <= set(rows["AAPL"])
    assert "AAPL" in check.description and "NVDA" not in check.description
    assert [p["decaying"] for p in webhook] == [["AAPL"]] and webhook[0]["event"] == "ldtm.decay"

    # The next night, the same alarm: still a warning, not posted again.
    again = _run(dagster_instance, tmp_path, sqlite_url, "AAPL,NVDA")
    assert not again.passed and again.metadata["notified"].value == []
    assert len(webhook) == 1

    calm = _run(dagster_instance, tmp_path, sqlite_url, "NVDA")
    assert calm.passed and calm.metadata["decaying"].value == []
