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

Serial correlation. The papers' PSR assumes i.i.d. returns: an AR(1) series with phi = 0.2
passes PSR >= 0.95 in ~9 % of no-skill samples. The report's PSR and DSR (`serial=True`) count the
series' serial correlation as fewer effective sessions, T_eff - 1 = (T - 1) / L, L = the long-run
variance over the variance (`lrv_ratio`, floored at 1: a series is never credited for negative
autocorrelation), both in the PSR's denominator and in the DSR's null trial variance V = 1 / (T_eff - 1).
The long-run (co)variances are HAC estimates: arch's quadratic-spectral kernel with its automatic
(Newey & West 1994) bandwidth, after VAR(1) prewhitening (Andrews & Monahan 1992), as Ledoit & Wolf
(2008) estimate them.

Against the benchmark (`sharpe_difference`): P(SR > bench) = Phi((SR_a - SR_b) / se), the Ledoit & Wolf
(2008) test of the difference of two Sharpe ratios: se by the delta method from the joint moments
(mean and second moment of the book and of the benchmark) with the HAC covariance above, so the
benchmark's own sampling noise, the correlation of the two series and their serial correlation all count
(the old "PSR vs bench" treated the benchmark's sample Sharpe as a known constant: >= 0.95 for ~12 % of
no-skill market-neutral books). benchmarks/sharpe_null.py measures its false rate and power.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
from arch.covariance.kernel import QuadraticSpectral
from scipy import stats
from sqlalchemy import Engine, select

from ldtm_core.data.calendar import SESSIONS_PER_YEAR
from ldtm_core.schema import gate_trials, model_registry

PERIODS_PER_YEAR = SESSIONS_PER_YEAR
EULER_GAMMA = 0.5772156649015329


def sharpe_per_period(returns) -> float:
    r = np.asarray(returns, dtype=float)
    if len(r) < 2:
        return math.nan
    sd = r.std(ddof=1)
    return float(r.mean() / sd) if sd > 0 else math.nan


def long_run_covariance(x, prewhiten: bool = True) -> np.ndarray:
    """HAC long-run covariance (k x k) of the columns of `x` (T x k, or a 1-d series): arch's
    quadratic-spectral kernel with its automatic bandwidth, centred, after VAR(1) prewhitening (Andrews &
    Monahan 1992: fit v_t = A v_t-1 + e_t, estimate the kernel covariance of e, recolour by (I - A)^-1;
    A shrunk to a spectral radius of at most 0.97 so a near-unit root cannot explode it)."""
    v = np.asarray(x, dtype=float)
    v = v.reshape(len(v), -1)
    v = v - v.mean(axis=0)
    if not prewhiten or len(v) < 8:
        return np.atleast_2d(np.asarray(QuadraticSpectral(v, center=False).cov.long_run, dtype=float))
    lagged, now = v[:-1], v[1:]
    a = np.linalg.lstsq(lagged, now, rcond=None)[0].T  # now = lagged @ A.T
    radius = float(np.max(np.abs(np.linalg.eigvals(a)))) if a.size else 0.0
    if radius > 0.97:
        a *= 0.97 / radius
    resid = now - lagged @ a.T
    inner = np.atleast_2d(np.asarray(QuadraticSpectral(resid, center=True).cov.long_run, dtype=float))
    recolour = np.linalg.inv(np.eye(v.shape[1]) - a)
    return recolour @ inner @ recolour.T


MIN_SERIAL_SESSIONS = 8  # fewer sessions: arch's kernel cannot be fitted, the figures are the plain ones


def lrv_ratio(returns) -> float:
    """The long-run variance of a series over its variance (1 for i.i.d. returns, (1 + phi) / (1 - phi)
    for AR(1)), floored at 1: how many sessions make one independent one."""
    r = np.asarray(returns, dtype=float)
    r = r[np.isfinite(r)]
    var = float(np.var(r)) if len(r) >= MIN_SERIAL_SESSIONS else 0.0
    if var <= 0:  # too short for the kernel (or constant): no correction
        return math.nan
    return max(float(long_run_covariance(r)[0, 0]) / var, 1.0)


def psr(returns, sr_star: float = 0.0, serial: bool = False) -> float:
    """Probabilistic Sharpe Ratio of a per-session series against a per-session benchmark SR*; `serial`:
    on T_eff sessions, the serial correlation counted (module docstring)."""
    r = np.asarray(returns, dtype=float)
    sr = sharpe_per_period(r)
    if not math.isfinite(sr) or len(r) < 3:
        return math.nan
    n = effective_sessions(r) if serial else len(r)
    return psr_from_moments(sr, n, float(stats.skew(r)), float(stats.kurtosis(r, fisher=False)), sr_star)


def effective_sessions(returns) -> float:
    """T_eff = 1 + (T - 1) / lrv_ratio: the i.i.d. sessions worth as much evidence as the series."""
    r = np.asarray(returns, dtype=float)
    ratio = lrv_ratio(r)
    return 1.0 + (len(r) - 1) / ratio if math.isfinite(ratio) else float(len(r))


def psr_from_moments(sr: float, n: float, skew: float, kurt: float, sr_star: float = 0.0) -> float:
    """PSR from the moments (per-session SR, T observations, skewness, non-excess kurtosis)."""
    var = 1.0 - skew * sr + (kurt - 1.0) / 4.0 * sr * sr
    if var <= 0 or n < 2:
        return math.nan
    return float(stats.norm.cdf((sr - sr_star) * math.sqrt(n - 1) / math.sqrt(var)))


@dataclass(frozen=True)
class SharpeDifference:
    """SR_a - SR_b per session with its HAC delta-method standard error (Ledoit & Wolf 2008)."""

    difference: float
    se: float
    probability: float  # Phi(difference / se): the probability the book's true Sharpe is above the other's
    n: int


def sharpe_difference(a, b) -> SharpeDifference:
    """Ledoit & Wolf (2008): SR_i = mu_i / sqrt(g_i - mu_i^2), g_i the second moment; the gradient of
    SR_a - SR_b in (mu_a, mu_b, g_a, g_b) times the HAC long-run covariance of (a, b, a^2, b^2)
    (`long_run_covariance`), over T. Sessions where either is missing are left out."""
    x = np.column_stack([np.asarray(a, dtype=float), np.asarray(b, dtype=float)])
    x = x[np.isfinite(x).all(axis=1)]
    n = len(x)
    nan = SharpeDifference(math.nan, math.nan, math.nan, n)
    if n < MIN_SERIAL_SESSIONS:
        return nan
    mu, g = x.mean(axis=0), (x**2).mean(axis=0)
    var = g - mu**2
    if (var <= 0).any():
        return nan
    sr = mu / np.sqrt(var)
    scale = var**1.5  # per series
    grad = np.array([g[0], -g[1], -mu[0] / 2.0, mu[1] / 2.0]) / scale[[0, 1, 0, 1]]
    psi = long_run_covariance(np.column_stack([x, x**2]))
    se2 = float(grad @ psi @ grad) / n
    diff = float(sr[0] - sr[1])
    if not se2 > 1e-18:  # the same series (a book holding the benchmark): no test
        return SharpeDifference(diff, math.nan, math.nan, n)
    se = math.sqrt(se2)
    return SharpeDifference(diff, se, float(stats.norm.cdf(diff / se)), n)


def expected_max_sharpe(n_trials: int, sr_variance: float) -> float:
    """SR0 of the Deflated Sharpe Ratio: the expected maximum per-session SR of N no-skill trials."""
    if n_trials <= 1:
        return 0.0
    z = (1 - EULER_GAMMA) * stats.norm.ppf(1 - 1 / n_trials) + EULER_GAMMA * stats.norm.ppf(
        1 - 1 / (n_trials * math.e)
    )
    return float(math.sqrt(sr_variance) * z)


def dsr(returns, n_trials: int, sr_variance: float | None = None, serial: bool = False) -> float:
    """Deflated Sharpe Ratio of a per-session series after `n_trials` trials; `sr_variance` (per
    session) defaults to 1 / (T - 1), the null sampling variance of SR (`serial`: 1 / (T_eff - 1), and the
    PSR on T_eff sessions)."""
    r = np.asarray(returns, dtype=float)
    if len(r) < 3:
        return math.nan
    n = effective_sessions(r) if serial else len(r)
    var = sr_variance if sr_variance is not None else 1.0 / (n - 1)
    return psr(r, expected_max_sharpe(n_trials, var), serial=serial)


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


def summary(returns: pd.Series, n_trials: int | None, benchmark: pd.Series | None = None) -> dict:
    """The figures of one daily series (index: evenings). PSR and DSR count the serial correlation;
    `n_trials` None: no DSR (a series not selected among trials, as the benchmark); `benchmark`: the
    probability the series' true Sharpe is above the benchmark's (`sharpe_difference`)."""
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
        "psr_vs_0": psr(r, 0.0, serial=True),
        "p_sharpe_above_benchmark": math.nan,
        "dsr": dsr(r, n_trials, serial=True) if n_trials is not None else math.nan,
    }
    if benchmark is not None:
        b = benchmark.reindex(r.index)
        out["p_sharpe_above_benchmark"] = sharpe_difference(r.to_numpy(), b.to_numpy(dtype=float)).probability
    return out


@dataclass(frozen=True)
class Trials:
    n: int
    source: str


def recipes_tried(engine: Engine, tickers: list[str] | None = None) -> Trials:
    """The DSR's trial count N: what the published books were selected among. The gate judges each
    recipe per ticker and publishes only the tickers whose recipe passed, so every (ticker, recipe) pair
    judged is a trial (counting distinct recipes said 1 where the gate chose among the tickers).
    The pairs come from the gate's trials ledger for these tickers, or from the distinct model configs
    ever registered per ticker when more were trained than judged (a recipe trained under the `seed`
    policy leaves no ledger row). The larger count is the honest one: every pair tried is a chance to
    have found a lucky book."""
    judged = select(gate_trials.c.ticker, gate_trials.c.config_signature).distinct()
    registered = select(model_registry.c.ticker, model_registry.c.config_json).distinct()
    if tickers:
        judged = judged.where(gate_trials.c.ticker.in_(tickers))
        registered = registered.where(model_registry.c.ticker.in_(tickers))
    with engine.connect() as conn:
        ledger = {(t, sig) for t, sig in conn.execute(judged).all()}
        configs = {(t, json.dumps(json.loads(c), sort_keys=True)) for t, c in conn.execute(registered).all()}
    pairs, where = (
        (ledger, "judged in the gate's trials ledger")
        if len(ledger) >= len(configs) and ledger
        else (configs, "registered (model configs)")
    )
    if not pairs:
        return Trials(1, "no recipe judged or registered for these tickers: 1 assumed")
    recipes = len({r for _, r in pairs})
    names = len({t for t, _ in pairs})
    return Trials(
        len(pairs),
        f"(ticker, recipe) pairs {where}: {recipes} recipe(s) across {names} ticker(s), "
        "the trials the published books were selected among",
    )
