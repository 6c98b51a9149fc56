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
    calls = {"always_up": np.ones(22), "persistence": np.sign(close - prev), "trend": np.full(22, -1.0)}
    got = score(model_right, actual, close, calls)  # the trend: a month of falls
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
        # backtest_fold_baselines rows (revision 0031), by name
        "baselines": {
            "persistence": {"n": 10, "hits": 6, "model_only": 2, "base_only": 2},
            "trend": {"n": 10, "hits": 7, "model_only": 1, "base_only": 3},
        },
    }
    got = baselines.pooled([fold, fold])
    assert got["always_up"] == Paired("always_up", 20, 8, 6, 2)
    assert got["trend"] == Paired("trend", 20, 14, 2, 6)
    old = {**fold, "baselines": {"persistence": fold["baselines"]["persistence"]}}  # no trend stored
    assert baselines.pooled([fold, old])["trend"] is None


def test_fold_rows_round_trip_through_from_fold():
    """What the backtest writes per fold (backtest_fold_baselines) is what the gate reads back; always-up
    stays the fold row's own columns."""
    scored = {"always_up": Paired("always_up", 9, 5, 2, 1), "trend": Paired("trend", 9, 6, 1, 3)}
    rows = baselines.fold_rows("bt", 2, scored)
    assert rows == [
        {
            "backtest_id": "bt",
            "fold": 2,
            "baseline": "trend",
            "n": 9,
            "hits": 6,
            "model_only": 1,
            "base_only": 3,
        }
    ]
    fold = {"n": 9, "always_up_accuracy": 5 / 9, "model_only_hits": 2, "up_only_hits": 1}
    got = baselines.from_fold({**fold, "baselines": {r["baseline"]: r for r in rows}})
    assert got["always_up"] == scored["always_up"] and got["trend"] == scored["trend"]
    assert got["persistence"] is None  # not stored: unknown, never a zero


def test_the_registry_is_the_one_list():
    """BASELINES / LABELS and the board's and gate's lists are read from the registry."""
    names = [b.name for b in baselines.registry()]
    assert names[:3] == ["always_up", "persistence", "trend"]
    assert tuple(b.name for b in baselines.gate_baselines()) == baselines.BASELINES
    assert baselines.LABELS["trend"] == f"trailing-{TREND_SESSIONS} majority"
    # A coin is the record's own comparison; the trailing majority is recorded with each row (chain v3).
    assert [b.name for b in baselines.board_baselines()] == ["always_up", "persistence", "trend"]
    assert baselines.family_size(103) == 309
    # Always-up's board columns kept their published names; the others follow the baseline's name.
    up, persist, trend = baselines.board_baselines()
    assert trend.sessions > 2 and (trend.column("p"), trend.column("beats")) == (
        "trend_p_value",
        "beats_trend",
    )
    assert (up.column("p"), up.column("model_only"), up.column("q")) == (
        "skill_p_value",
        "model_only",
        "q_vs_always_up",
    )
    assert (persist.column("p"), persist.column("n")) == ("persistence_p_value", "persistence_n")


def test_each_call_reads_only_closes_up_to_its_row():
    """No hindsight, for every registered baseline: changing the closes after a row never changes its call."""
    rng = np.random.default_rng(5)
    close = 100 + np.cumsum(rng.choice([-1.0, 0.0, 1.0], size=80))
    prev = np.concatenate([[np.nan], close[:-1]])
    rows = np.arange(1, 60)
    before = baselines.calls(close, prev, rows, baselines.registry())
    later = close.copy()
    later[60:] += 40
    after = baselines.calls(later, np.concatenate([[np.nan], later[:-1]]), rows, baselines.registry())
    for name, call in before.items():
        assert np.array_equal(call, after[name], equal_nan=True), name
        assert set(np.unique(call[~np.isnan(call)])) <= {-1.0, 0.0, 1.0}, name


def test_recorded_closes_give_the_two_close_baselines_and_no_call_for_the_others():
    """A row without recorded calls (chain version < 3) is scored from its own two closes: the same call
    as on the whole series for a baseline that reads two closes; no call for one that reads more."""
    close = np.array([100.0, 101.0, 101.0, 99.0])
    prev = np.array([np.nan, 100.0, 101.0, 101.0])
    whole = baselines.calls(close, prev, np.arange(4), baselines.registry())
    rec = baselines.recorded_close_calls(close, prev, baselines.registry())
    assert np.array_equal(rec["persistence"], whole["persistence"], equal_nan=True)
    assert rec["persistence"].tolist()[1:] == [1.0, 0.0, -1.0] and np.isnan(rec["persistence"][0])
    assert (rec["always_up"] == 1).all() and np.isnan(rec["trend"]).all()
