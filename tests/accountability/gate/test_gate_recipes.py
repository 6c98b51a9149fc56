"""A global recipe goes through the same gate as the per-ticker LSTM: its fit backtested on its panel,
judged per ticker (first deployment, a paired comparison with an LSTM champion, stale vs refreshed for
its own retrain), promoted, and then served as the ticker's active model."""

from __future__ import annotations

import datetime as dt

import pytest
import torch
from accountability_helpers import ingest, make_settings
from sqlalchemy import select

from ldtm_core.accountability.gate import champion_challenger as cc
from ldtm_core.accountability.gate import ledger as gate_ledger
from ldtm_core.accountability.gate.backtest_pool import backtest_candidate, backtest_model
from ldtm_core.accountability.gate.gate import run_gate
from ldtm_core.accountability.gate.policy import GateThresholds
from ldtm_core.accountability.ledger.snapshots import predict
from ldtm_core.learning.backtest import run_backtest
from ldtm_core.learning.model import get_profile
from ldtm_core.learning.recipes import global_fit, serving
from ldtm_core.learning.registry import active_model, get_model
from ldtm_core.learning.training import train_ticker
from ldtm_core.schema import backtest_folds, gate_trials

TICKERS = ["AAPL", "MSFT", "NVDA"]
# The absolute bar only, set so any model meets it: these tests are about the path, not the skill.
ANY = GateThresholds(policy="seed", min_direction_accuracy=0.0, max_mean_abs_pct_error=100.0)
# The evidence policy with no minimum of rows: the paired comparison always runs.
PAIRED = GateThresholds(min_direction_accuracy=0.0, max_mean_abs_pct_error=100.0, min_rows=1, min_fold_rows=1)


@pytest.fixture
def store(engine, tmp_path, db_url):
    ingest(engine, TICKERS)
    serving.clear_cache()
    torch.manual_seed(0)
    return engine, make_settings(tmp_path, db_url)


def _deploy_ridge(engine, settings) -> dict[str, int]:
    outcomes = global_fit.train_global(engine, settings, "ridge", TICKERS)
    for o in outcomes:
        result = backtest_candidate(engine, o.ticker, None, 1, settings=settings, folds=2)
        assert result.status == "ok", result.reason
        assert run_gate(engine, settings, o.ticker, thresholds=ANY).passed
    return {o.ticker: o.model_id for o in outcomes}


def test_a_global_recipe_passes_the_gate_and_serves_as_the_active_model(store):
    engine, settings = store
    ids = _deploy_ridge(engine, settings)

    for t, model_id in ids.items():
        rec = active_model(engine, t)
        assert rec.id == model_id and rec.recipe == "ridge" and rec.promoted_path
    with engine.connect() as conn:
        signatures = set(conn.execute(select(backtest_folds.c.config_signature)).scalars())
        # Only the first ticker's backtest fitted the folds; each ticker's rows are its own.
        rows = conn.execute(select(backtest_folds.c.ticker, backtest_folds.c.model_id)).all()
    assert signatures == {get_model(engine, ids["AAPL"]).arch_signature}
    assert sorted(set(rows)) == sorted(ids.items())
    result = predict(engine, settings, run_date=dt.date(2024, 6, 28), mode="replay")
    assert result.tickers_predicted == TICKERS and not result.used_candidate
    assert result.model_versions == {t: active_model(engine, t).version for t in TICKERS}


def test_an_lstm_challenger_is_paired_with_a_recipe_champion_on_the_same_rows(store):
    engine, settings = store
    ids = _deploy_ridge(engine, settings)
    cfg = get_profile("demo")
    out = train_ticker(engine, settings, "AAPL", cfg, "demo")
    assert out.status == "trained", out.reason
    run_backtest(engine, settings, "AAPL", folds=2)

    report = run_gate(engine, settings, "AAPL", thresholds=PAIRED)

    comparison = report.comparison
    assert comparison.evidence == cc.CONFIGS and comparison.champion_model_id == ids["AAPL"]
    # Both recipes named where the report is read.
    assert f"AAPL model {out.model_id} (recipe lstm, evidence policy)" in report.summary()
    assert f"(champion model {ids['AAPL']}, ridge)" in report.summary()
    champion_folds = backtest_model(engine, settings, "AAPL", folds=2, model_id=ids["AAPL"])
    assert champion_folds.refit_folds == 0  # the recipe's folds were stored by its own backtest
    assert comparison.paired.n == sum(f.scores.n for f in champion_folds.folds)
    with engine.connect() as conn:
        assert (
            conn.execute(select(gate_trials.c.kind).where(gate_trials.c.ticker == "AAPL")).scalar()
            == gate_ledger.RECIPE
        )


def test_a_retrain_of_the_same_recipe_is_judged_stale_against_refreshed(store):
    engine, settings = store
    _deploy_ridge(engine, settings)
    again = global_fit.train_global(engine, settings, "ridge", ["MSFT"])
    backtest_candidate(engine, "MSFT", None, 1, settings=settings, folds=2)

    report = run_gate(engine, settings, "MSFT", thresholds=PAIRED)

    assert report.model_id == again[0].model_id
    assert report.comparison.evidence == cc.REFRESH
    assert report.comparison.paired.n > 0 and "missing" not in report.comparison.note
