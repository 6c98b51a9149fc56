"""The `price_features` library in the store: the `features` build writes each price row's library values
beside its bars with the prices' fingerprint, the tabular recipes read them while the bars they load
equal the stored ones, and a fit or a forecast from stored rows equals one from a recomputation."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
from pathlib import Path

import numpy as np
import pandas as pd
from accountability_helpers import ingest, make_settings
from sqlalchemy import func, select, text, update

from ldtm_core.data import feature_store as fs
from ldtm_core.data import price_features
from ldtm_core.data.feature_store import library
from ldtm_core.data.prices import load_ticker_prices
from ldtm_core.learning.price_windows import load_price_arrays
from ldtm_core.learning.recipes import global_fit, serving
from ldtm_core.learning.recipes.family import config_from, inputs_of
from ldtm_core.learning.recipes.global_fit import panel_bars
from ldtm_core.learning.recipes.inputs import PRICE_FEATURES, with_library
from ldtm_core.learning.registry import get_model
from ldtm_core.schema import price_feature_rows, price_feature_sets

TICKERS = ["AAPL", "NVDA"]
AS_OF = dt.date(2024, 3, 28)
NAMES = list(price_features.feature_names())


def _panel(engine, tickers=TICKERS, start=None, stop=None) -> pd.DataFrame:
    return panel_bars(
        load_price_arrays(engine, tickers, start or dt.date(2023, 1, 3), stop or dt.date(2024, 6, 28))
    )


def test_build_stores_every_price_row_with_its_bars_and_library_values(engine):
    ingest(engine, TICKERS)
    outcomes = {o.ticker: o for o in fs.build_features(engine, TICKERS)}
    stored = library.stored_rows(engine, TICKERS)
    sets = fs.library_sets(engine, TICKERS)
    for t in TICKERS:
        prices = load_ticker_prices(engine, t)
        o, (dates, rows) = outcomes[t], stored[t]
        assert (o.library, o.library_rows_written) == ("built", len(prices))
        assert list(dates) == list(np.asarray(prices["date"], dtype="datetime64[D]"))
        bars = prices[["open", "high", "low", "close", "volume"]].to_numpy(dtype=np.float64)
        np.testing.assert_array_equal(rows[:, :5], bars)
        want = price_features.compute(prices[["date", "open", "high", "low", "close", "volume"]], t)[NAMES]
        np.testing.assert_array_equal(rows[:, 5:], want.to_numpy())  # bit for bit, NaN warm-up included
        s = sets[t]
        assert s.definition == fs.LIBRARY_DEFINITION and s.columns == library.COLUMNS
        assert s.fingerprint == o.fingerprint and s.rows == len(prices)
    again = fs.build_features(engine, TICKERS)
    assert [(o.library, o.library_rows_written) for o in again] == [("current", 0), ("current", 0)]
    checks = fs.check_features(engine, TICKERS)
    assert checks["library_current"].passed and checks["library_match_recomputation"].passed
    assert checks["library_match_recomputation"].checked == 100


def test_a_new_session_is_appended_and_a_revised_bar_rebuilds_the_library(engine):
    df = ingest(engine, TICKERS)
    from ldtm_core.data.ingest import ingest_frame

    last = df["date"].max()
    with engine.begin() as conn:  # the last session arrives later
        conn.execute(text("DELETE FROM prices WHERE date = :d"), {"d": pd.Timestamp(last).date()})
    fs.build_features(engine, TICKERS)
    before = library.stored_rows(engine, ["AAPL"])["AAPL"]
    ingest_frame(engine, df[df["date"] == last], "synthetic")
    appended = {o.ticker: o for o in fs.build_features(engine, TICKERS)}
    assert (appended["AAPL"].library, appended["AAPL"].library_rows_written) == ("appended", 1)
    after = library.stored_rows(engine, ["AAPL"])["AAPL"]
    np.testing.assert_array_equal(after[1][:-1], before[1])  # earlier rows untouched
    prices = load_ticker_prices(engine, "AAPL")
    want = library.library_rows(prices, "AAPL")
    np.testing.assert_array_equal(after[1], want)  # equal to a build from scratch

    with engine.begin() as conn:  # an old bar is revised: the whole set is rebuilt
        conn.execute(
            text("UPDATE prices SET volume = volume + 1 WHERE ticker = 'AAPL' AND date = :d"),
            {"d": prices["date"].iloc[100]},
        )
    rebuilt = {o.ticker: o for o in fs.build_features(engine, TICKERS)}
    assert rebuilt["AAPL"].library == "built" and "revised" in rebuilt["AAPL"].library_reason
    assert rebuilt["NVDA"].library == "current"


def test_readers_take_stored_rows_only_while_the_bars_equal_them(engine, caplog):
    ingest(engine, TICKERS)
    bars = _panel(engine)
    computed, why = fs.library_values(engine, bars)
    assert set(why) == set(TICKERS) and all(r == "no stored price features" for r in why.values())
    fs.build_features(engine, TICKERS)
    stored, why = fs.library_values(engine, bars)
    assert why == {}
    np.testing.assert_array_equal(stored, computed)  # the whole series: exactly a recomputation

    # A stored value that no longer matches is never read once a bar under it differs.
    with engine.begin() as conn:
        conn.execute(
            text("UPDATE prices SET close = close * 1.01 WHERE ticker = 'NVDA' AND date = '2024-02-01'")
        )
    with caplog.at_level(logging.INFO, logger="ldtm.features"):
        after, why = fs.library_values(engine, _panel(engine))
    assert list(why) == ["NVDA"] and "revised" in why["NVDA"] and "2024-02-01" in why["NVDA"]
    assert "NVDA: price features computed from prices" in caplog.text
    fresh = price_features.compute_panel(_panel(engine))[NAMES].to_numpy()
    np.testing.assert_array_equal(after, fresh)

    # Another definition of the library: not read.
    with engine.begin() as conn:
        conn.execute(update(price_feature_sets).values(definition="price_features-old"))
    _, why = fs.library_values(engine, bars)
    assert all("another definition" in r for r in why.values())


def test_a_recent_block_reads_the_same_windows_as_a_recomputation(engine):
    ingest(engine, TICKERS)
    fs.build_features(engine, TICKERS)
    lookback = PRICE_FEATURES.lookback(None)
    arrays = load_price_arrays(engine, TICKERS, dt.date(2023, 1, 3), AS_OF)
    tails = {t: {k: v[-lookback:] for k, v in a.items()} for t, a in arrays.items()}
    bars = panel_bars(tails)
    stored, why = fs.library_values(engine, bars)
    fresh = price_features.compute_panel(bars)[NAMES].to_numpy()
    assert why == {}
    warm = np.r_[np.arange(lookback - 1), lookback + np.arange(lookback - 1)]
    assert np.isnan(stored[warm]).all()  # within LOOKBACK of the block's start: NaN, as computed over it
    ends = [lookback - 1, 2 * lookback - 1]
    np.testing.assert_allclose(stored[ends], fresh[ends], rtol=1e-12, atol=1e-15)  # same windows


def test_a_fit_and_a_forecast_from_stored_rows_equal_those_from_a_recomputation(
    engine, tmp_path, db_url, monkeypatch
):
    ingest(engine, TICKERS)
    settings = make_settings(tmp_path, db_url)
    first = global_fit.train_global(engine, settings, "ridge", TICKERS, as_of=AS_OF)
    fs.build_features(engine, TICKERS)
    with engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(price_feature_rows)).scalar_one() > 0

    def no_recomputation(bars):
        raise AssertionError("the library was recomputed")

    with monkeypatch.context() as m:  # the second fit reads the stored rows only
        m.setattr(price_features, "compute_panel", no_recomputation)
        second = global_fit.train_global(engine, settings, "ridge", TICKERS, as_of=AS_OF)
    assert [o.status for o in second] == ["trained", "trained"], [o.reason for o in second]
    digest = [
        hashlib.sha256(Path(get_model(engine, o[0].model_id).checkpoint_path).read_bytes()).hexdigest()
        for o in (first, second)
    ]
    assert digest[0] == digest[1]  # the same artifact, byte for byte

    rec = get_model(engine, second[0].model_id)
    cfg = config_from(rec.recipe, json.loads(rec.config_json))
    arrays = load_price_arrays(engine, TICKERS, dt.date(2023, 1, 3), dt.date(2024, 4, 1))
    with_store, _, skipped = serving.feature_rows(arrays, TICKERS, dt.date(2024, 4, 1), cfg, engine)
    without, _, _ = serving.feature_rows(arrays, TICKERS, dt.date(2024, 4, 1), cfg)
    assert skipped == {}
    for t in TICKERS:
        np.testing.assert_allclose(with_store[t], without[t], rtol=1e-12, atol=1e-15)


def test_inputs_that_do_not_read_the_library_get_no_store_read(engine):
    ingest(engine, ["AAPL"])
    bars = _panel(engine, ["AAPL"])
    windows = inputs_of(global_fit.recipe_config("global_lstm"))
    assert not windows.library and with_library(engine, bars, windows) is bars
    assert PRICE_FEATURES.library and inputs_of(global_fit.recipe_config("ridge_market")).library


def test_the_library_check_names_a_tampered_value(engine):
    ingest(engine, ["AAPL"])
    fs.build_features(engine, ["AAPL"])
    dates, rows = library.stored_rows(engine, ["AAPL"])["AAPL"]
    bad = rows[200].copy()
    bad[library.COLUMNS.index("vol_20")] *= 1.5
    with engine.begin() as conn:
        conn.execute(
            update(price_feature_rows)
            .where(price_feature_rows.c.date == dates[200].astype(object))
            .values(packed=bad.astype("<f8").tobytes())
        )
    checks = fs.check_features(engine, ["AAPL"], sample_rows=len(dates))
    assert not checks["library_match_recomputation"].passed
    assert checks["library_match_recomputation"].problems["AAPL"].startswith(f"vol_20 on {dates[200]}")
    assert checks["library_current"].passed  # the fingerprint is of the prices, which did not change
    # Prices gone: the set goes with them.
    with engine.begin() as conn:
        conn.execute(text("DELETE FROM prices WHERE ticker = 'AAPL'"))
    assert [o.status for o in fs.build_features(engine, ["AAPL"])] == ["no prices"]
    with engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(price_feature_sets)).scalar_one() == 0
        assert conn.execute(select(func.count()).select_from(price_feature_rows)).scalar_one() == 0


def test_force_rebuilds_the_library_too(engine):
    ingest(engine, ["AAPL"])
    fs.build_features(engine, ["AAPL"])
    (o,) = fs.build_features(engine, ["AAPL"], force=True)
    assert (o.library, o.library_reason) == ("built", "forced") and o.library_rows_written > 0
