"""Signal performance, part 4: return statistics of a daily series (SPEC §15, STATS_NOTES "Returns").

Annualised return and volatility, Sharpe, Sortino and maximum drawdown come from empyrical-reloaded
(252 sessions a year, risk-free 0). Written here, each tested against known values: the drawdown's dates,
the Probabilistic Sharpe Ratio (Bailey & Lopez de Prado 2012) and the Deflated Sharpe Ratio (2014).

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

import empyrical
import numpy as np
import pandas as pd
from scipy import stats
from sqlalchemy import Engine, select

from ldtm_core.schema import model_registry

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


def summary(returns: pd.Series, n_trials: int, benchmark: pd.Series | None = None) -> dict:
    """The figures of one daily series (index: evenings)."""
    r = returns.dropna().astype(float)
    n = len(r)
    dd = max_drawdown_dates(r)
    out = {
        "evenings": n,
        "total_return": float(np.prod(1.0 + r.to_numpy()) - 1.0) if n else math.nan,
        "annual_return": float(empyrical.annual_return(r, annualization=PERIODS_PER_YEAR)) if n else math.nan,
        "annual_vol": float(empyrical.annual_volatility(r, annualization=PERIODS_PER_YEAR))
        if n > 1
        else math.nan,
        "sharpe": float(empyrical.sharpe_ratio(r, annualization=PERIODS_PER_YEAR)) if n > 1 else math.nan,
        "sortino": float(empyrical.sortino_ratio(r, annualization=PERIODS_PER_YEAR)) if n > 1 else math.nan,
        "max_drawdown": float(empyrical.max_drawdown(r)) if n else math.nan,
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
    """How many recipes were tried for the DSR: the distinct model configs ever registered for these
    tickers (model_registry.config_json, whole config as the registry's signature hashes it).

    The one place to re-point at the gate's trials ledger once it exists."""
    stmt = select(model_registry.c.config_json).distinct()
    if tickers:
        stmt = stmt.where(model_registry.c.ticker.in_(tickers))
    with engine.connect() as conn:
        configs = {json.dumps(json.loads(c), sort_keys=True) for (c,) in conn.execute(stmt).all()}
    return Trials(max(len(configs), 1), "distinct model configs ever registered for these tickers")
