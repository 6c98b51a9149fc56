"""Recipes that read the market (learning.recipes.market): an input from another ticker, point in time,
that finds what no model of one ticker's own prices can: a ticker following the market a session late."""

from __future__ import annotations

import datetime as dt
import hashlib
import json

import numpy as np
import pandas as pd
import pytest
import statsmodels.api as sm
from accountability_helpers import ingest, make_settings

from ldtm_core.accountability.decay.record import drift_of
from ldtm_core.accountability.ledger.snapshots import predict
from ldtm_core.data import price_features
from ldtm_core.data.synthetic_market import PLANTED_FAMILIES, generate
from ldtm_core.errors import InputError
from ldtm_core.horizons import HORIZONS
from ldtm_core.learning.recipes import global_fit, serving, tabular
from ldtm_core.learning.recipes.family import TARGET_DEFINITION, inputs_of
from ldtm_core.learning.recipes.global_backtest import backtest_fit
from ldtm_core.learning.recipes.market import (
    LAG_BETA_WINDOW,
    MARKET_RETURN_WINDOWS,
    MarketConfig,
    lag_beta,
    market_names,
    market_returns,
)
from ldtm_core.learning.registry import get_model

FOLLOWERS = list(PLANTED_FAMILIES["lagged_factor"]["members"][:6])
AS_OF = dt.date(2024, 3, 28)


def _arrays(bars: pd.DataFrame) -> dict:
    return {
        t: {
            "date": pd.to_datetime(g["date"]).to_numpy().astype("datetime64[D]"),
            "close": g["close"].to_numpy(),
        }
        for t, g in bars.groupby("ticker")
    }


def test_market_returns_read_the_market_up_to_the_row_date_only():
    bars = generate(["QQQ"], "2024-01-02", "2024-03-28", seed=3)
    arrays = _arrays(bars)
    days = arrays["QQQ"]["date"]
    got = market_returns(arrays, "QQQ", days)
    close = arrays["QQQ"]["close"]
    for j, k in enumerate(MARKET_RETURN_WINDOWS):
        assert np.isnan(got[:k, j]).all()
        np.testing.assert_allclose(got[k:, j], np.log(close[k:] / close[:-k]), rtol=1e-9, atol=1e-15)
    # A later bar changed: no earlier row moves (nothing reads ahead).
    changed = {"QQQ": {**arrays["QQQ"], "close": np.r_[close[:-1], close[-1] * 2]}}
    np.testing.assert_array_equal(market_returns(changed, "QQQ", days)[:-1], got[:-1])
    # A day the market has no bar, or no market at all: no inputs, never a stale value.
    holiday = np.array(["2024-01-15"], dtype="datetime64[D]")  # Martin Luther King Jr. Day
    assert np.isnan(market_returns(arrays, "QQQ", holiday)).all()
    assert np.isnan(market_returns({}, "QQQ", days)).all()


def test_only_the_market_recipe_finds_a_ticker_that_follows_the_market_a_session_late():
    bars = generate(["QQQ", *FOLLOWERS], "2016-01-04", "2024-12-31", seed=5)
    bars = bars[["ticker", "date", "open", "high", "low", "close", "volume"]]
    context = _arrays(bars)
    found = {}
    for cfg in (MarketConfig(kind="ridge_market"), tabular.TabularConfig(kind="ridge")):
        x, y, keys = tabular.training_frame(bars, cfg, context)
        followers = keys["ticker"].isin(FOLLOWERS).to_numpy()
        dates = pd.to_datetime(keys["date"])
        cut = dates.quantile(0.7)
        # Purged: a training row's month-ahead target stays before the first test evening.
        train = (dates < cut - pd.Timedelta(days=45)).to_numpy()
        test = (dates >= cut).to_numpy() & followers
        model = tabular.fit(x[train], y[train], cfg)
        pred = model.predict(x[test])[:, 0]
        found[cfg.kind] = np.corrcoef(pred, y.to_numpy()[test, 0])[0, 1]
    # Planted: corr 0.31 with yesterday's market move; no own-price input carries it.
    assert found["ridge_market"] > 0.2, found
    assert abs(found["ridge"]) < 0.08, found


def test_the_lead_lag_beta_is_each_tickers_own_and_reads_nothing_ahead():
    bars = generate(["QQQ", FOLLOWERS[0], "AAPL"], "2019-01-02", "2024-12-31", seed=5)
    bars = bars.sort_values(["ticker", "date"], kind="stable").reset_index(drop=True)
    days = pd.to_datetime(bars["date"]).to_numpy().astype("datetime64[D]")
    m1 = market_returns(_arrays(bars), "QQQ", days)[:, 0]
    tickers, close = bars["ticker"].to_numpy(dtype=str), bars["close"].to_numpy()
    beta = lag_beta(tickers, close, m1)
    # Against statsmodels' OLS slope on the same window of one row.
    follower = np.flatnonzero(tickers == FOLLOWERS[0])
    row = follower[-1]
    window = follower[-LAG_BETA_WINDOW:]
    r = np.log(close[window] / close[window - 1])
    x = sm.add_constant(m1[window - 1])
    assert beta[row] == pytest.approx(sm.OLS(r, x).fit().params[1], rel=1e-9)
    # Planted beta 0.5 for the follower; a regular ticker's is near 0; the first window is not yet full.
    assert 0.3 < np.nanmean(beta[follower]) < 0.7
    assert abs(np.nanmean(beta[tickers == "AAPL"])) < 0.2
    assert np.isnan(beta[follower[:LAG_BETA_WINDOW]]).all()
    # A later close changed: no earlier row moves.
    later = close.copy()
    later[row] *= 1.5
    np.testing.assert_array_equal(lag_beta(tickers, later, m1)[:row], beta[:row])


@pytest.fixture
def store(engine, tmp_path, db_url):
    ingest(engine, ["QQQ", "AAPL", *FOLLOWERS[:2]])
    serving.clear_cache()
    return engine, make_settings(tmp_path, db_url)


def test_a_market_recipe_trains_backtests_and_serves_with_the_market_loaded_beside(store):
    engine, settings = store
    tickers = ["AAPL", *FOLLOWERS[:2]]  # the market itself need not be served
    outcomes = global_fit.train_global(
        engine, settings, "lightgbm_market", tickers, as_of=AS_OF, overrides={"n_estimators": 20}
    )
    assert [o.status for o in outcomes] == ["trained"] * 3, [o.reason for o in outcomes]
    rec = get_model(engine, outcomes[0].model_id)
    assert rec.recipe == "lightgbm_market" and json.loads(rec.config_json)["market"] == "QQQ"

    # Decay's drift reads the recipe's own inputs, the market's columns among them.
    drift = drift_of(engine, rec, 20)
    assert set(drift.values) == set(market_names()) and drift.reference_end == rec.trained_on_date

    fit = backtest_fit(engine, settings, rec.id, folds=1, test_sessions=10, reuse=False)
    assert sorted(fit.results) == sorted(tickers) and fit.refit_folds == 1

    day = dt.date(2024, 4, 3)
    result = predict(engine, settings, run_date=day, mode="replay")
    assert result.tickers_predicted == sorted(tickers), result.skipped
    # The served forecast is the artifact's prediction from the ticker's bars and the market's.
    model = serving.load_verified(rec)
    rows, closes, skipped = serving.feature_rows(
        serving_arrays(engine, ["AAPL", "QQQ"], day), ["AAPL"], day, model.config
    )
    names = list(model.features)
    market_cols = [names.index(f"market_ret_{k}") for k in MARKET_RETURN_WINDOWS]
    on_day = market_returns(
        serving_arrays(engine, ["QQQ"], day), "QQQ", np.array([day], dtype="datetime64[D]")
    )
    assert not skipped and rows["AAPL"][market_cols].tolist() == pytest.approx(on_day[0].tolist())


def serving_arrays(engine, tickers, day):
    from ldtm_core.learning.price_windows import load_price_arrays

    return load_price_arrays(engine, tickers, dt.date(2023, 1, 1), day)


def test_without_the_market_in_the_store_every_ticker_fails_naming_it(store):
    engine, settings = store
    outcomes = global_fit.train_global(
        engine, settings, "ridge_market", ["AAPL"], as_of=AS_OF, overrides={"market": "SPY"}
    )
    assert outcomes[0].status == "failed"
    assert outcomes[0].reason.startswith("recipe ridge_market: its inputs read SPY, which has no prices")
    with pytest.raises(InputError, match="kind 'ridge' is not one of ridge_market"):
        MarketConfig(kind="ridge")


def test_recipes_on_price_features_keep_the_signature_they_were_stored_with():
    # The signature stored with every ridge / LightGBM row before inputs were a family's choice (and
    # before a fit could choose its device or recorded its features: the config had no such fields).
    for kind in ("ridge", "lightgbm"):
        cfg = tabular.TabularConfig(kind=kind)
        spec = {
            "config": {k: v for k, v in cfg.to_dict().items() if k not in ("device", "features")},
            "features_fingerprint": price_features.fingerprint(),
            "horizons": [h.name for h in HORIZONS],
            "targets": TARGET_DEFINITION,
        }
        blob = json.dumps(spec, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
        assert cfg.signature == hashlib.sha256(blob.encode("ascii")).hexdigest()
        assert inputs_of(cfg).names(cfg) == price_features.feature_names()
    # Another market is another recipe: its signature differs.
    assert MarketConfig(market="SPY").signature != MarketConfig().signature


def test_the_market_inputs_fingerprint_names_every_definition_they_read(monkeypatch):
    from ldtm_core.learning.recipes import market

    before = market.MARKET_INPUTS.fingerprint(MarketConfig())
    # The lead-lag beta's window is part of what a fit read: another window is another signature.
    monkeypatch.setattr(market, "LAG_BETA_WINDOW", LAG_BETA_WINDOW + 1)
    assert market.MARKET_INPUTS.fingerprint(MarketConfig()) != before
    monkeypatch.undo()
    monkeypatch.setattr(market, "MARKET_RETURN_WINDOWS", (1, 5))
    assert market.MARKET_INPUTS.fingerprint(MarketConfig()) != before
    monkeypatch.undo()
    monkeypatch.setattr(price_features, "fingerprint", lambda names=None: "f" * 64)
    assert market.MARKET_INPUTS.fingerprint(MarketConfig()) != before
