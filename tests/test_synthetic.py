"""The synthetic market: deterministic, on real XNYS sessions, OHLC-consistent, with late listings."""

from __future__ import annotations

import datetime as dt

import exchange_calendars as xcals
import numpy as np
import pandas as pd
import pytest

from ldtm_core.data.synthetic import LATE_LISTINGS, generate
from ldtm_core.data.universe import load_universe
from ldtm_core.errors import InputError


@pytest.fixture(scope="module")
def full_5y() -> pd.DataFrame:
    return generate(load_universe("full"), "2019-01-01", "2023-12-31", seed=11)


def test_same_seed_same_prices_other_seed_other_prices():
    a = generate(["AAPL", "QQQ"], "2022-01-01", "2022-12-31", seed=5)
    b = generate(["AAPL", "QQQ"], "2022-01-01", "2022-12-31", seed=5)
    c = generate(["AAPL", "QQQ"], "2022-01-01", "2022-12-31", seed=6)
    pd.testing.assert_frame_equal(a, b)
    assert not np.allclose(a["close"].to_numpy(), c["close"].to_numpy())


def test_ticker_prices_independent_of_other_tickers_requested():
    alone = generate(["NVDA"], "2021-01-01", "2022-12-31", seed=2)
    crowd = generate(["AAPL", "TSLA", "NVDA", "SQQQ"], "2021-01-01", "2022-12-31", seed=2)
    pd.testing.assert_frame_equal(alone, crowd[crowd["ticker"] == "NVDA"].reset_index(drop=True))


def test_dates_are_exactly_xnys_sessions():
    df = generate(["AAPL"], "2020-01-01", "2021-12-31", seed=0)
    # Independent source of truth: the exchange calendar itself.
    expected = xcals.get_calendar("XNYS").sessions_in_range("2020-01-01", "2021-12-31")
    assert list(pd.to_datetime(df["date"])) == list(expected.tz_localize(None) if expected.tz else expected)
    dates = set(pd.to_datetime(df["date"]).dt.strftime("%Y-%m-%d"))
    assert {"2020-04-10", "2020-07-03", "2021-07-05", "2020-11-26", "2021-01-01"}.isdisjoint(dates)
    assert (pd.to_datetime(df["date"]).dt.dayofweek < 5).all()


def test_ohlc_consistent_and_volume_positive(full_5y):
    df = full_5y
    assert (df["low"] > 0).all()
    assert (df["low"] <= df[["open", "close"]].min(axis=1)).all()
    assert (df["high"] >= df[["open", "close"]].max(axis=1)).all()
    assert df["volume"].dtype == np.int64 and (df["volume"] > 0).all()
    assert df.notna().all().all()
    assert not df.duplicated(["ticker", "date"]).any()


def test_some_tickers_list_late_and_the_rest_have_full_history(full_5y):
    sizes = full_5y.groupby("ticker").size()
    full_len = sizes.max()
    late = set(sizes[sizes < full_len].index)
    assert late, "no late-listed ticker in the full universe"
    assert late <= set(LATE_LISTINGS)
    assert {"AAPL", "TSLA", "NVDA", "QQQ"}.isdisjoint(late)
    # Recent IPOs start on their listing day and end on the last session like everyone else.
    first = full_5y.groupby("ticker")["date"].min()
    for ticker in late:
        assert first[ticker] == dt.date.fromisoformat(LATE_LISTINGS[ticker])
    last = full_5y.groupby("ticker")["date"].max()
    assert last.nunique() == 1


def test_volatility_regimes_change_over_time(full_5y):
    aapl = full_5y[full_5y["ticker"] == "AAPL"]
    r = np.log(aapl["close"]).diff().dropna()
    rolling = r.rolling(60).std().dropna()
    assert rolling.max() / rolling.min() > 1.8  # calm and turbulent stretches both occur


def test_levered_etfs_move_with_the_market(full_5y):
    wide = full_5y.pivot(index="date", columns="ticker", values="close")
    r = np.log(wide[["QQQ", "TQQQ", "SQQQ"]]).diff().dropna()
    assert r["TQQQ"].corr(r["SQQQ"]) < -0.9
    assert r["TQQQ"].corr(r["QQQ"]) > 0.9
    assert 2.5 < r["TQQQ"].std() / r["QQQ"].std() < 3.5


def test_too_short_range_is_refused():
    with pytest.raises(InputError, match="fewer than 2 XNYS sessions"):
        generate(["AAPL"], "2024-12-25", "2024-12-25", seed=0)


def test_prices_do_not_depend_on_the_requested_range():
    """Nightly ingest extends `end` by a day: no already-stored price may change under the predictions."""
    tickers = ["AAPL", "SQQQ", "FER"]
    short = generate(tickers, "2024-01-02", "2024-06-28", seed=3)
    longer = generate(tickers, "2021-01-04", "2024-07-31", seed=3)
    merged = short.merge(longer, on=["ticker", "date"], suffixes=("_s", "_l"))
    assert len(merged) == len(short)
    for col in ("open", "high", "low", "close", "volume"):
        assert (merged[f"{col}_s"] == merged[f"{col}_l"]).all(), col
