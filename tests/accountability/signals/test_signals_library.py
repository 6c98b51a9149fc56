"""The hand-written rank IC and quintile returns (accountability.signals.ic) against alphalens-reloaded's own
figures on the same predicted and realised returns (alphalens is a dev-only dependency: it computes forward
returns from a price matrix and pulls IPython and seaborn, so it does not run in the nightly)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from ldtm_core.accountability.signals import ic as signal_ic
from ldtm_core.accountability.signals.rows import with_returns
from ldtm_core.horizons import NAMES

al_perf = pytest.importorskip("alphalens.performance")
al_utils = pytest.importorskip("alphalens.utils")


def _data(evenings=60, names=23, seed=0):
    rng = np.random.default_rng(seed)
    real = rng.standard_normal((evenings, names)) * 0.02
    pred = 0.2 * real + rng.standard_normal((evenings, names)) * 0.02
    pred[3, 5] = real[7, 2] = np.nan  # a missing prediction and a missing actual
    days = pd.bdate_range("2022-03-01", periods=evenings)
    tickers = [f"T{i:02d}" for i in range(names)]
    idx = pd.MultiIndex.from_product([days, tickers], names=["date", "asset"])
    factor_data = pd.DataFrame({"1D": real.ravel(), "factor": pred.ravel()}, index=idx).dropna()
    factor_data["factor_quantile"] = al_utils.quantize_factor(factor_data, quantiles=5)
    rows = pd.DataFrame(
        {
            "ticker": np.tile(tickers, evenings),
            "run_date": np.repeat([d.date() for d in days], names),
            "in_sample": False,
            "run_date_close": 50.0,
            "direction_pred": "neutral",
        }
    )
    for h in NAMES:
        rows[f"{h}_date"] = rows["run_date"]
        rows[f"{h}_pred"] = 50.0 * (1 + pred.ravel())
        rows[f"{h}_actual"] = 50.0 * (1 + real.ravel())
    return factor_data, with_returns(rows)


def test_ic_per_evening_equals_alphalens():
    factor_data, rows = _data()
    want = al_perf.factor_information_coefficient(factor_data)["1D"]
    got = signal_ic.ic_series(rows, "next_day").set_index("run_date")["ic"]
    np.testing.assert_allclose(got.to_numpy(), want.to_numpy(), rtol=1e-10)


def test_quintile_labels_and_mean_returns_equal_alphalens():
    factor_data, rows = _data()
    pred, _ = signal_ic.matrices(rows, "next_day")
    labels = pd.DataFrame(signal_ic.quintile_labels(pred.to_numpy()), index=pred.index, columns=pred.columns)
    mine = labels.stack().dropna().astype(int)
    theirs = factor_data["factor_quantile"].copy()
    theirs.index = pd.MultiIndex.from_arrays(
        [theirs.index.get_level_values(0).date, theirs.index.get_level_values(1)]
    )
    assert (mine.sort_index() == theirs.sort_index().to_numpy()).all()
    want, _ = al_perf.mean_return_by_quantile(factor_data, by_date=False, demeaned=False)
    got = signal_ic.quintile_returns(rows, "next_day")
    np.testing.assert_allclose([got[k].mean() for k in range(1, 6)], want["1D"].to_numpy(), rtol=1e-10)


def test_return_figures_match_empyrical():
    """Annual return and volatility, Sharpe, Sortino (hand-written in signal_stats) against empyrical's;
    the drawdown matches when the series starts with a gain (empyrical ignores the starting capital)."""
    from ldtm_core.accountability.signals import stats as signal_stats

    empyrical = pytest.importorskip("empyrical")
    rng = np.random.default_rng(3)
    r = rng.normal(0.0004, 0.01, 500)
    r[0] = 0.01
    k = signal_stats.PERIODS_PER_YEAR
    assert signal_stats.annual_return(r) == pytest.approx(empyrical.annual_return(r, annualization=k))
    assert signal_stats.annual_volatility(r) == pytest.approx(empyrical.annual_volatility(r, annualization=k))
    assert signal_stats.sharpe_annual(r) == pytest.approx(empyrical.sharpe_ratio(r, annualization=k))
    assert signal_stats.sortino_annual(r) == pytest.approx(empyrical.sortino_ratio(r, annualization=k))
    days = [d.date() for d in pd.bdate_range("2022-01-03", periods=len(r))]
    s = signal_stats.summary(pd.Series(r, index=days), 1)
    assert s["max_drawdown"] == pytest.approx(empyrical.max_drawdown(r))
