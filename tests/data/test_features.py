"""The reference recipe's daily features: order, warm-up, Wilder RSI by hand, SMA ratios and log returns."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from ldtm_core.data.calendar import sessions_between
from ldtm_core.data.features import REFERENCE_FEATURES, compute_features, wilder_rsi

# StockCharts' classic RSI example (Wilder smoothing), 20 closes.
CLOSES = [44.34, 44.09, 44.15, 43.61, 44.33, 44.83, 45.10, 45.42, 45.84, 46.08,
          45.89, 46.03, 45.61, 46.28, 46.28, 46.00, 46.03, 46.41, 46.22, 45.64]  # fmt: skip


def prices_from(closes, volume=None) -> pd.DataFrame:
    n = len(closes)
    dates = sessions_between("2024-01-01", "2024-12-31")[:n]
    c = np.asarray(closes, dtype=float)
    return pd.DataFrame(
        {
            "date": dates,
            "open": c * 0.99,
            "high": c * 1.01,
            "low": c * 0.98,
            "close": c,
            "volume": volume if volume is not None else np.arange(1, n + 1) * 1000,
        }
    )


def hand_rsi(closes, period=14):
    """Wilder's definition, step by step: first averages are simple means of `period` changes."""
    changes = [closes[i] - closes[i - 1] for i in range(1, len(closes))]
    gains = [max(c, 0.0) for c in changes]
    losses = [max(-c, 0.0) for c in changes]
    avg_gain = sum(gains[:period]) / period
    avg_loss = sum(losses[:period]) / period
    out = {period: 100 - 100 / (1 + avg_gain / avg_loss)}
    for i in range(period, len(changes)):
        avg_gain = (avg_gain * (period - 1) + gains[i]) / period
        avg_loss = (avg_loss * (period - 1) + losses[i]) / period
        out[i + 1] = 100 - 100 / (1 + avg_gain / avg_loss)
    return out


def test_wilder_rsi_matches_hand_computation_and_published_values():
    rsi = wilder_rsi(pd.Series(CLOSES))
    assert rsi.iloc[:14].isna().all()
    expected = hand_rsi(CLOSES)
    for i, value in expected.items():
        assert rsi.iloc[i] == pytest.approx(value, abs=1e-9)
    # Published figures for this series; the spreadsheet rounds its averages, hence the loose tolerance.
    published = [70.53, 66.32, 66.55, 69.41, 66.36, 57.97]
    assert rsi.iloc[14:20].tolist() == pytest.approx(published, abs=0.1)


def test_rsi_edge_cases_no_losses_and_no_moves():
    assert wilder_rsi(pd.Series(np.arange(1.0, 21.0))).iloc[14:].eq(100.0).all()
    assert wilder_rsi(pd.Series(np.full(20, 7.0))).iloc[14:].eq(50.0).all()


def test_eleven_columns_in_spec_order_and_warmup_dropped():
    closes = [10 + 0.5 * math.sin(i) + 0.05 * i for i in range(40)]
    px = prices_from(closes)
    feats = compute_features(px)
    assert list(feats.columns) == [
        "open", "high", "low", "close", "volume", "log_return_1d", "log_return_5d",
        "rsi_14", "close_sma_5", "close_sma_10", "close_sma_20",
    ]  # fmt: skip
    assert tuple(feats.columns) == REFERENCE_FEATURES
    # SMA-20 first exists on the 20th row (index 19): 40 rows -> 21 feature rows.
    assert len(feats) == 21
    assert feats.index[0] == px["date"].iloc[19]
    assert not feats.isna().any().any()


def test_log_returns_and_sma_ratios_on_a_small_example():
    closes = [float(x) for x in range(1, 26)]  # 1, 2, ..., 25
    feats = compute_features(prices_from(closes))
    last = feats.iloc[-1]  # close 25
    assert last["close"] == 25.0
    assert last["log_return_1d"] == pytest.approx(math.log(25 / 24))
    assert last["log_return_5d"] == pytest.approx(math.log(25 / 20))
    assert last["close_sma_5"] == pytest.approx(25 / ((21 + 22 + 23 + 24 + 25) / 5))
    assert last["close_sma_10"] == pytest.approx(25 / (sum(range(16, 26)) / 10))
    assert last["close_sma_20"] == pytest.approx(25 / (sum(range(6, 26)) / 20))
    first = feats.iloc[0]  # close 20, the first row with SMA-20
    assert first["close"] == 20.0
    assert first["close_sma_20"] == pytest.approx(20 / (sum(range(1, 21)) / 20))
    assert first["volume"] == 20 * 1000


def test_features_at_t_ignore_later_prices():
    closes = [10 + 0.3 * math.cos(i / 2) for i in range(45)]
    base = compute_features(prices_from(closes))
    bumped = list(closes)
    bumped[30] *= 1.5
    after = compute_features(prices_from(bumped))
    cutoff = prices_from(closes)["date"].iloc[30]
    pd.testing.assert_frame_equal(base[base.index < cutoff], after[after.index < cutoff])
    assert not np.allclose(base.loc[cutoff:].to_numpy(), after.loc[cutoff:].to_numpy())


def test_unsorted_input_is_sorted_by_date():
    px = prices_from([10 + 0.1 * i for i in range(30)])
    pd.testing.assert_frame_equal(compute_features(px), compute_features(px.iloc[::-1]))
