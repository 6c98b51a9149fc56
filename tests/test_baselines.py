"""Baselines without hindsight on the model's rows, each with its exact paired test (issue 21)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import binomtest

from ldtm_core.scoring import baselines
from ldtm_core.scoring.baselines import TREND_SESSIONS, Paired, score, trailing_majority


def test_trailing_majority_uses_only_the_last_sessions_up_to_the_row():
    rng = np.random.default_rng(3)
    close = 100 + np.cumsum(rng.choice([-1.0, 0.0, 1.0], size=120))
    prev = np.concatenate([[np.nan], close[:-1]])
    rows = np.arange(120)
    got = trailing_majority(close, prev, rows)
    for i in rows:
        moves = np.sign(
            close[max(0, i - TREND_SESSIONS + 1) : i + 1] - prev[max(0, i - TREND_SESSIONS + 1) : i + 1]
        )
        total = np.nansum(moves)
        assert got[i] == (-1.0 if total < 0 else 1.0), i
    # Changing a close after the row never changes the row's call: no hindsight.
    later = close.copy()
    later[61:] += 50
    assert (trailing_majority(later, np.concatenate([[np.nan], later[:-1]]), rows[:61]) == got[:61]).all()


def test_in_a_falling_market_always_up_flatters_and_the_trailing_majority_does_not():
    """A falling market: 8 of 22 next days up. The model, right on 9 (40.9 %), is 'ahead' of always-up
    (36.4 %) by noise and far behind the trailing majority, which says down."""
    close = np.full(22, 100.0)
    prev = np.full(22, 100.5)  # every run date fell
    actual = np.array([101.0] * 8 + [99.0] * 14)
    pred = np.array([101.0] * 3 + [99.0] * 5 + [99.0] * 6 + [101.0] * 8)
    model_right = np.sign(pred - close) == np.sign(actual - close)
    trend = np.full(22, -1.0)  # a month of falls
    got = score(model_right, actual, close, prev, trend)
    up, trend_b, persist = got["always_up"], got["trend"], got["persistence"]
    assert (up.hits, up.model_only, up.base_only) == (8, 6, 5)
    assert up.p_value == pytest.approx(binomtest(6, 11, 0.5, alternative="greater").pvalue)
    assert up.verdict().startswith("does not beat always-up (36.36%)") and "p = 0.500" in up.verdict()
    assert trend_b.accuracy == pytest.approx(14 / 22) and (trend_b.model_only, trend_b.base_only) == (3, 8)
    assert trend_b.p_value == pytest.approx(binomtest(3, 11, 0.5, alternative="greater").pvalue)
    assert persist == Paired("persistence", 22, 14, 3, 8)  # "down again" every evening, like the trend here
    # Only a significant edge is called "beats", and always with its p-value.
    strong = Paired("always_up", 100, 40, 30, 5)
    assert strong.verdict().startswith("beats always-up (40.00%)") and "p = < 0.001" in strong.verdict()


def test_pooled_needs_every_fold_and_sums_the_rows():
    fold = {
        "n": 10,
        "always_up_accuracy": 0.4,
        "model_only_hits": 3,
        "up_only_hits": 1,
        "persistence_hits": 6,
        "persistence_model_only": 2,
        "persistence_only": 2,
        "trend_hits": 7,
        "trend_model_only": 1,
        "trend_only": 3,
    }
    got = baselines.pooled([fold, fold])
    assert got["always_up"] == Paired("always_up", 20, 8, 6, 2)
    assert got["trend"] == Paired("trend", 20, 14, 2, 6)
    old = {**fold, "trend_hits": None}  # a fold written before revision 0020
    assert baselines.pooled([fold, old])["trend"] is None
