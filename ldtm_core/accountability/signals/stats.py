"""Signal performance, part 4: return statistics of a daily series (SPEC §15, STATS_NOTES "Returns").

Annualised return and volatility, Sharpe and Sortino are empyrical-reloaded's definitions (252 sessions a
year, risk-free 0), written here in a few lines and tested against empyrical's own figures
(tests/test_signals_library.py): empyrical is not a runtime dependency because it pulls peewee (an ORM
for its data loaders) that ships no wheel, which the offline image build cannot install. The maximum
drawdown counts the starting capital as the first peak (empyrical does not: a first-day loss is a
drawdown here). Also tested against known values: the drawdown's dates, the Probabilistic Sharpe Ratio
(Bailey & Lopez de Prado 2012) and the Deflated Sharpe Ratio (2014).

PSR(SR*) = Phi((SR - SR*) sqrt(T - 1) / sqrt(1 - g3 SR + (g4 - 1) / 4 SR^2)), SR per session (not
annualised), g3 the skewness and g4 the (non-excess) kurtosis of the returns.
DSR = PSR(SR0), SR0 = sqrt(V) ((1 - gamma) Phi^-1(1 - 1/N) + gamma Phi^-1(1 - 1/(N e))), N the trials,
V the variance of the trials' Sharpe ratios; without the trials' own ratios V is the sampling variance of
a no-skill trial's SR over the same T sessions, 1 / (T - 1) (every trial assumed skill-less: the null).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats
from sqlalchemy import Engine, select

from ldtm_core.schema import gate_trials, model_registry

PERIODS_PER_YEAR = 252
EULER_GAMMA = 0.5772156649015329


def sharpe_per_period(returns) -> float:
    r = np.asarray(returns, dtype=float)
    if len(r) < 2:
        return math.nan
    sd = r.std(ddof=1)
    return float(r.mean() / sd) if sd > 0 else math.nan


def psr(returns, sr_star: float = 0.0) -> float:
    """Probabilistic Sharpe Ratio of a per-session series against a per-session benchmark SR*."""
    r = np.asarray(returns, dtype=float)
    sr = sharpe_per_period(r)
    if not math.isfinite(sr) or len(r) < 3:
        return math.nan
    return psr_from_moments(sr, len(r), float(stats.skew(r)), float(stats.kurtosis(r, fisher=False)), sr_star)


def psr_from_moments(sr: float, n: int, skew: float, kurt: float, sr_star: float = 0.0) -> float:
    """PSR from the moments (per-session SR, T observations, skewness, non-excess kurtosis)."""
    var = 1.0 - skew * sr + (kurt - 1.0) / 4.0 * sr * sr
    if var <= 0 or n < 2:
        return math.nan
    return float(stats.norm.cdf((sr - sr_star) * math.sqrt(n - 1) / math.sqrt(var)))


def expected_max_sharpe(n_trials: int, sr_variance: float) -> float:
    """SR0 of the Deflated Sharpe Ratio: the expected maximum per-session SR of N no-skill trials."""
    if n_trials <= 1:
        return 0.0
    z = (1 - EULER_GAMMA) * stats.norm.ppf(1 - 1 / n_trials) + EULER_GAMMA * stats.norm.ppf(
        1 - 1 / (n_trials * math.e)
    )
    return float(math.sqrt(sr_variance) * z)


def dsr(returns, n_trials: int, sr_variance: float | None = None) -> float:
    """Deflated Sharpe Ratio of a per-session series after `n_trials` recipes; `sr_variance` (per
    session) defaults to 1 / (T - 1), the null sampling variance of SR."""
    r = np.asarray(returns, dtype=float)
    if len(r) < 3:
        return math.nan
    var = sr_variance if sr_variance is not None else 1.0 / (len(r) - 1)
    return psr(r, expected_max_sharpe(n_trials, var))


@dataclass(frozen=True)
class Drawdown:
    depth: float  # negative fraction (-0.12: 12 % below the peak)
    peak: object  # the date of the peak before the trough
    trough: object
    recovered: object  # first date back at the peak, None if not yet


def max_drawdown_dates(returns: pd.Series) -> Drawdown:
    """The deepest fall of the compounded series below its running peak, with its dates.

    Dates are the series' index (evenings; each return is earned over the session after its evening)."""
    r = returns.dropna()
    if r.empty:
        return Drawdown(math.nan, None, None, None)
    wealth = np.concatenate([[1.0], np.cumprod(1.0 + r.to_numpy(dtype=float))])
    dates = [None, *r.index]
    peak = np.maximum.accumulate(wealth)
    dd = wealth / peak - 1.0
    trough = int(np.argmin(dd))
    if dd[trough] >= 0:
        return Drawdown(0.0, None, None, None)
    start = int(np.argmax(wealth[: trough + 1] == peak[trough]))
    after = np.nonzero(wealth[trough:] >= peak[trough])[0]
    recovered = dates[trough + int(after[0])] if len(after) else None
    return Drawdown(float(dd[trough]), dates[start] if start else r.index[0], dates[trough], recovered)


def drawdown_series(returns: pd.Series) -> pd.Series:
    wealth = (1.0 + returns.fillna(0.0)).cumprod()
    return wealth / np.maximum(wealth.cummax(), 1.0) - 1.0


def annual_return(r: np.ndarray) -> float:
    """Compound annual growth rate (empyrical.annual_return)."""
    return float(np.prod(1.0 + r) ** (PERIODS_PER_YEAR / len(r)) - 1.0)


def annual_volatility(r: np.ndarray) -> float:
    """Sample standard deviation, annualised (empyrical.annual_volatility)."""
    return float(np.std(r, ddof=1) * math.sqrt(PERIODS_PER_YEAR))


def sharpe_annual(r: np.ndarray) -> float:
    """Mean over sample standard deviation, annualised, risk-free 0 (empyrical.sharpe_ratio)."""
    sd = np.std(r, ddof=1)
    return float(np.mean(r) / sd * math.sqrt(PERIODS_PER_YEAR)) if sd > 0 else math.nan


def sortino_annual(r: np.ndarray) -> float:
    """Mean over the root mean square of the losses, annualised, target 0 (empyrical.sortino_ratio)."""
    downside = math.sqrt(float(np.mean(np.minimum(r, 0.0) ** 2)))
    mean = float(np.mean(r))
    if downside == 0:
        return math.inf if mean > 0 else math.nan
    return mean / downside * math.sqrt(PERIODS_PER_YEAR)


def summary(returns: pd.Series, n_trials: int, benchmark: pd.Series | None = None) -> dict:
    """The figures of one daily series (index: evenings)."""
    r = returns.dropna().astype(float)
    n = len(r)
    dd = max_drawdown_dates(r)
    out = {
        "evenings": n,
        "total_return": float(np.prod(1.0 + r.to_numpy()) - 1.0) if n else math.nan,
        "annual_return": annual_return(r.to_numpy()) if n else math.nan,
        "annual_vol": annual_volatility(r.to_numpy()) if n > 1 else math.nan,
        "sharpe": sharpe_annual(r.to_numpy()) if n > 1 else math.nan,
        "sortino": sortino_annual(r.to_numpy()) if n > 1 else math.nan,
        "max_drawdown": dd.depth if n else math.nan,
        "drawdown_peak": dd.peak,
        "drawdown_trough": dd.trough,
        "drawdown_recovered": dd.recovered,
        "psr_vs_0": psr(r, 0.0),
        "psr_vs_benchmark": math.nan,
        "dsr": dsr(r, n_trials),
    }
    if benchmark is not None:
        b = benchmark.reindex(r.index).dropna()
        out["psr_vs_benchmark"] = psr(r, sharpe_per_period(b)) if len(b) > 1 else math.nan
    return out


@dataclass(frozen=True)
class Trials:
    n: int
    source: str


def recipes_tried(engine: Engine, tickers: list[str] | None = None) -> Trials:
    """How many recipes were tried for the DSR: the distinct recipes (config signatures) the gate's trials
    ledger judged for these tickers, or the distinct model configs ever registered for them when more
    were trained than judged (a recipe trained under the `seed` policy leaves no ledger row). The larger
    count is the honest one: every recipe tried is a chance to have found a lucky book."""
    judged = select(gate_trials.c.config_signature).distinct()
    registered = select(model_registry.c.config_json).distinct()
    if tickers:
        judged = judged.where(gate_trials.c.ticker.in_(tickers))
        registered = registered.where(model_registry.c.ticker.in_(tickers))
    with engine.connect() as conn:
        ledger = {sig for (sig,) in conn.execute(judged).all()}
        configs = {json.dumps(json.loads(c), sort_keys=True) for (c,) in conn.execute(registered).all()}
    if len(ledger) >= len(configs) and ledger:
        return Trials(len(ledger), "distinct recipes judged in the gate's trials ledger for these tickers")
    return Trials(max(len(configs), 1), "distinct model configs ever registered for these tickers")
