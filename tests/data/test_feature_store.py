"""The feature store: fingerprinted builds, the read rule (stored only when current), and its checks."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pandas as pd
import pytest
import torch
from accountability_helpers import ingest, make_model, make_settings
from sqlalchemy import func, select, text

from ldtm_core.accountability.ledger import snapshots as snapshots_mod
from ldtm_core.accountability.ledger.snapshots import predict
from ldtm_core.data import feature_store as fs
from ldtm_core.data.features import WARMUP_ROWS, compute_features
from ldtm_core.data.prices import load_ticker_prices
from ldtm_core.data.samples import build_samples
from ldtm_core.db import lift_append_only
from ldtm_core.learning import training, training_loop
from ldtm_core.learning.model import get_profile
from ldtm_core.schema import feature_sets, features

TICKERS = ["AAPL", "NVDA"]


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)


def _set_close(engine, ticker: str, day, close: float) -> None:
    """Revise one stored close (the bar stays a valid bar)."""
    with engine.begin() as conn:
        conn.execute(
            text(
                "UPDATE prices SET close = :c, high = CASE WHEN high < :c THEN :c ELSE high END, "
                "low = CASE WHEN low > :c THEN :c ELSE low END WHERE ticker = :t AND date = :d"
            ),
            {"c": close, "t": ticker, "d": day},
        )


def test_build_stores_exactly_the_computed_features_with_their_fingerprint(engine):
    df = ingest(engine, TICKERS)
    outcomes = {o.ticker: o for o in fs.build_features(engine, TICKERS)}
    for t in TICKERS:
        px = df[df.ticker == t].drop(columns="ticker")
        want = compute_features(px)
        o = outcomes[t]
        assert (o.status, o.rows, o.price_rows, o.warmup_rows) == ("built", len(want), len(px), WARMUP_ROWS)
        assert (o.first_date, o.last_date) == (want.index[0], want.index[-1])
        assert o.fingerprint == fs.fingerprint(load_ticker_prices(engine, t))
        got = fs.read_stored(engine, t)
        assert list(got.index) == list(want.index)
        np.testing.assert_array_equal(got.to_numpy(), want.to_numpy())  # exact: doubles round-trip
        assert o.stats["rsi_14"]["max"] == pytest.approx(want["rsi_14"].max())
    # Nothing changed: a rebuild writes nothing.
    again = fs.build_features(engine, TICKERS)
    assert [(o.status, o.rows_written) for o in again] == [("current", 0), ("current", 0)]


def test_a_new_session_is_appended_and_a_revised_bar_rebuilds(engine):
    ingest(engine, ["AAPL"], end="2024-06-27")
    fs.build_features(engine, ["AAPL"])
    ingest(engine, ["AAPL"], end="2024-06-28")  # the nightly case: one more session, history unchanged
    [o] = fs.build_features(engine, ["AAPL"])
    assert (o.status, o.rows_written) == ("appended", 1)
    full = compute_features(load_ticker_prices(engine, "AAPL"))
    np.testing.assert_array_equal(fs.read_stored(engine, "AAPL").to_numpy(), full.to_numpy())
    assert fs.check_features(engine, ["AAPL"], sample_rows=0)["current"].passed

    _set_close(engine, "AAPL", dt.date(2023, 6, 1), 123.0)
    assert "revised" in fs.check_features(engine, ["AAPL"], sample_rows=0)["current"].problems["AAPL"]
    [o] = fs.build_features(engine, ["AAPL"])
    assert o.status == "built" and "revised" in o.reason
    np.testing.assert_array_equal(
        fs.read_stored(engine, "AAPL").to_numpy(),
        compute_features(load_ticker_prices(engine, "AAPL")).to_numpy(),
    )
    with engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(features)).scalar() == o.rows
        assert conn.execute(select(func.count()).select_from(feature_sets)).scalar() == 1


def test_fingerprint_changes_with_any_bar_and_with_corporate_actions():
    px = pd.DataFrame(
        {
            "date": pd.bdate_range("2024-01-01", periods=40).date,
            "open": 10.0,
            "high": 11.0,
            "low": 9.0,
            "close": np.linspace(10, 11, 40),
            "volume": 1000,
        }
    )
    base = fs.fingerprint(px)
    assert fs.PriceFingerprint.from_token(base.token) == base
    for col in ("close", "volume", "open"):
        changed = px.copy()
        changed.loc[5, col] = changed.loc[5, col] + 1
        assert fs.fingerprint(changed) != base, col
    assert fs.fingerprint(px, [(dt.date(2024, 1, 10), 10.0, "split")]).corporate_actions != fs.NO_ACTIONS
    assert fs.fingerprint(px.iloc[::-1]) == base  # order of the frame does not matter


def test_stale_features_are_not_used_for_training(engine, db_url, tmp_path, monkeypatch):
    """Change one past close after the build, then train: the stale stored features are not used."""
    settings = make_settings(tmp_path, db_url)
    ingest(engine, ["AAPL"])
    fs.build_features(engine, ["AAPL"])
    cfg = get_profile("demo", max_epochs=1)
    seen = []
    real_fit = training_loop.fit

    def spy(train, val, *a, **kw):
        seen.append(train)
        return real_fit(train, val, *a, **kw)

    monkeypatch.setattr(training_loop, "fit", spy)
    first = training.train_ticker(engine, settings, "AAPL", cfg, "demo")
    assert (first.status, first.features) == ("trained", "stored")

    day = dt.date(2023, 9, 12)
    stale = fs.read_stored(engine, "AAPL")
    _set_close(engine, "AAPL", day, float(stale.loc[day, "close"]) * 1.5)
    second = training.train_ticker(engine, settings, "AAPL", cfg, "demo")
    assert second.status == "trained", second.reason
    assert second.features.startswith("recomputed") and "revised" in second.features
    # The samples trained on are the ones the changed prices give, not the stored ones.
    prices = load_ticker_prices(engine, "AAPL")
    fresh = build_samples(prices, cfg.window)
    from_stale = build_samples(prices, cfg.window, features=stale)
    idx = np.isin(fresh.dates, seen[1].dates)
    np.testing.assert_array_equal(seen[1].x, fresh.x[idx])
    assert not np.array_equal(seen[1].x, from_stale.x[idx])
    # The read says why, and the stored set is still the stale one until the asset rebuilds it.
    _, read = fs.prices_and_features(engine, "AAPL")
    assert read.source == "recomputed" and "revised" in read.reason
    assert not fs.check_features(engine, ["AAPL"], sample_rows=0)["current"].passed


def test_training_as_of_reads_stored_rows_up_to_that_date(engine):
    ingest(engine, ["AAPL"])
    fs.build_features(engine, ["AAPL"])
    as_of = dt.date(2024, 3, 28)
    prices, read = fs.prices_and_features(engine, "AAPL", end=as_of)
    assert read.source == "store" and prices["date"].max() == as_of
    np.testing.assert_array_equal(read.frame.to_numpy(), compute_features(prices).to_numpy())


def test_inference_uses_stored_windows_and_recomputes_a_revised_one(engine, db_url, tmp_path, monkeypatch):
    settings = make_settings(tmp_path, db_url)
    df = ingest(engine, TICKERS, start="2022-01-03")
    for i, t in enumerate(TICKERS):
        make_model(engine, settings, t, seed=i)
    fs.build_features(engine, TICKERS)
    seen = {}
    real = snapshots_mod.batched_forward

    def spy(models, x):
        seen["x"] = x.clone()
        return real(models, x)

    monkeypatch.setattr(snapshots_mod, "batched_forward", spy)
    d = sorted(df["date"].unique())[-5]
    res = predict(engine, settings, run_date=d)
    assert res.tickers_predicted == TICKERS and res.features_recomputed == {}
    stored_x = seen["x"].clone()
    for i, t in enumerate(TICKERS):  # the stored window is the training sample's window
        hist = df[(df.ticker == t) & (df.date <= d)].drop(columns="ticker")
        np.testing.assert_allclose(stored_x[i].numpy(), build_samples(hist, 30).x[-1], atol=1e-6)

    # A bar revised 10 sessions before the evening: NVDA's stored rows no longer match its prices.
    revised = sorted(df["date"].unique())[-15]
    _set_close(
        engine, "NVDA", revised, float(df[(df.ticker == "NVDA") & (df.date == revised)].close.iloc[0]) * 1.3
    )
    lift_append_only(engine)  # rewrites the record on purpose: SQLite's append-only triggers off
    with engine.begin() as conn:
        conn.execute(text("DELETE FROM snapshots"))
    res = predict(engine, settings, run_date=d)
    assert list(res.features_recomputed) == ["NVDA"]
    assert "revised" in res.features_recomputed["NVDA"]
    assert res.summary()["features_recomputed"] == res.features_recomputed
    hist = load_ticker_prices(engine, "NVDA", end=d)
    np.testing.assert_allclose(seen["x"][1].numpy(), build_samples(hist, 30).x[-1], atol=1e-6)
    assert not np.allclose(seen["x"][1].numpy(), stored_x[1].numpy())
    np.testing.assert_array_equal(seen["x"][0].numpy(), stored_x[0].numpy())


def test_checks_catch_a_tampered_value(engine):
    ingest(engine, TICKERS)
    fs.build_features(engine, TICKERS)
    checks = fs.check_features(engine, TICKERS, sample_rows=10_000)
    assert all(r.passed for r in checks.values()), {k: r.problems for k, r in checks.items()}
    assert (
        checks["current"].checked == 2 and checks["match_recomputation"].checked == checks["finite"].checked
    )

    stored = fs.read_stored(engine, "NVDA")
    day = stored.index[40]
    with engine.begin() as conn:
        conn.execute(
            text(
                "UPDATE features SET rsi_14 = 101.5, close_sma_5 = close_sma_5 + 1e-6 "
                "WHERE ticker = 'NVDA' AND date = :d"
            ),
            {"d": day},
        )
    checks = fs.check_features(engine, TICKERS, sample_rows=10_000)
    assert not checks["rsi_in_range"].passed and str(day) in checks["rsi_in_range"].problems["NVDA"]
    assert checks["finite"].passed
    assert list(checks["match_recomputation"].problems) == ["NVDA"]
    assert str(day) in checks["match_recomputation"].problems["NVDA"]
    # The fingerprint is about prices: tampering with stored values is what the recomputation check is for.
    assert checks["current"].passed
    # An infinity planted in a stored row fails `finite` (SQLite turns NaN into NULL, which NOT NULL refuses).
    with engine.begin() as conn:
        conn.execute(
            text("UPDATE features SET log_return_1d = :inf WHERE ticker = 'AAPL' AND date = :d"),
            {"inf": float("inf"), "d": day},
        )
    checks = fs.check_features(engine, TICKERS, sample_rows=5)
    assert list(checks["finite"].problems) == ["AAPL"] and str(day) in checks["finite"].problems["AAPL"]


def test_bulk_reads_equal_the_plain_reads(engine):
    ingest(engine, TICKERS)
    fs.build_features(engine, TICKERS)
    bulk_prices = fs.load_prices_bulk(engine, [*TICKERS, "TSLA"])
    bulk_stored = fs.load_stored_bulk(engine, [*TICKERS, "TSLA"])
    assert bulk_prices["TSLA"].empty and bulk_stored["TSLA"].empty
    for t in TICKERS:
        plain = load_ticker_prices(engine, t)
        assert fs.fingerprint(bulk_prices[t]) == fs.fingerprint(plain)
        assert list(bulk_prices[t]["date"]) == list(plain["date"])
        pd.testing.assert_frame_equal(bulk_stored[t], fs.read_stored(engine, t))


def test_a_ticker_whose_prices_are_gone_loses_its_stored_set(engine):
    ingest(engine, ["AAPL"])
    fs.build_features(engine, ["AAPL"])
    with engine.begin() as conn:
        conn.execute(text("DELETE FROM prices WHERE ticker = 'AAPL'"))
    [o] = fs.build_features(engine, ["AAPL"])
    assert o.status == "no prices"
    assert fs.stored_sets(engine) == {} and fs.read_stored(engine, "AAPL").empty
