"""`make demo` run again in the same checkout: the second and third runs retrain, promote or keep new
candidates and re-predict the same evenings, and must still succeed (blocking checks included)."""

import pytest
from dagster import AssetCheckKey, AssetKey, instance_for_test
from dagster._core.storage.asset_check_execution_record import AssetCheckExecutionRecordStatus
from ldtm_dagster_helpers import repo_instance_config, tiny_resources
from sqlalchemy import func, select

from ldtm_core.accountability.board.leaderboard import leaderboard, leaderboard_by_model
from ldtm_core.accountability.ledger.audit import verify
from ldtm_core.db import get_engine
from ldtm_core.learning.registry import EXTERNAL
from ldtm_core.schema import snapshots
from ldtm_dagster.demo import run_demo

EVENINGS = 3


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_demo_runs_three_times_in_the_same_checkout(sqlite_url, tmp_path, monkeypatch):
    # Every gate passes, so every run promotes a new version that re-predicts the same evenings.
    monkeypatch.setenv("LDTM_GATE_MIN_ACCURACY", "0")
    monkeypatch.setenv("LDTM_GATE_MAX_ERROR_PCT", "1000")
    # The seed's bar: the evidence policy would judge the same folds once and require beating a coin.
    monkeypatch.setenv("LDTM_GATE_POLICY", "seed")
    # One app database and home, like ./.ldtm; one ticker keeps three whole-graph runs affordable.
    tickers = ["AAPL"]
    resources = tiny_resources(tmp_path / "home", sqlite_url, universe=",".join(tickers))
    engine = get_engine(sqlite_url)
    boards = []
    for attempt in range(3):
        # A fresh temporary Dagster instance each time, as `make demo` without DAGSTER_HOME does.
        with instance_for_test(overrides=repo_instance_config()) as instance:
            run_demo(
                instance,
                resources,
                replay_sessions=EVENINGS,
                outcome_sessions=2,
                log=lambda _m: None,
            )  # raises on a failed step, e.g. a failed blocking check
            for name in ("one_per_ticker", "audit_chain_intact", "chain_matches_dagster_anchors"):
                key = AssetCheckKey(AssetKey("snapshots"), name)
                record = instance.event_log_storage.get_latest_asset_check_execution_by_key([key])[key]
                assert record.status == AssetCheckExecutionRecordStatus.SUCCEEDED, (attempt, name)
        boards.append(leaderboard(engine).set_index("ticker")[["n", "hits"]])
        with engine.connect() as conn:
            counted = select(func.count()).select_from(snapshots)
            rows = conn.execute(counted.where(snapshots.c.model_status != EXTERNAL)).scalar_one()
            desk = conn.execute(counted.where(snapshots.c.model_status == EXTERNAL)).scalar_one()
            evenings = conn.execute(
                select(func.count()).select_from(
                    select(snapshots.c.ticker, snapshots.c.run_date).distinct().subquery()
                )
            ).scalar_one()
        assert evenings == len(tickers) * EVENINGS
        assert rows == evenings * (attempt + 1)  # each run's new version added its own row per evening
        assert desk == evenings  # the demo's submitted model: recorded once, its file again a no-op
    # Each evening is scored once, with the prediction published first: later runs change nothing.
    assert (boards[0]["n"] == EVENINGS).all()
    assert boards[0].equals(boards[1]) and boards[1].equals(boards[2])
    per_model = leaderboard_by_model(engine)
    assert len(per_model) == len(tickers) * 3 and (per_model["n"] == EVENINGS).all()
    assert verify(engine).ok
