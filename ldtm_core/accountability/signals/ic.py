"""Signal performance, part 2: cross-sectional rank IC and quintile returns (SPEC §15, STATS_NOTES "Returns").

Per evening and horizon, across the tickers with a filled row: the Spearman correlation of predicted vs
realised return (the IC), and the mean realised return of each quintile of predicted return. Over the
evenings: mean IC, IC IR (mean / standard deviation, per evening) and a t-statistic whose standard error
is Newey-West (HAC, Bartlett) with lag h - 1, h the horizon in sessions (consecutive evenings' week and
month targets overlap, so their ICs are autocorrelated and a plain t would reject far too often).

Hand-written because the library does not fit the rows (docs/architecture.md): alphalens-reloaded computes
forward returns from a price matrix by shifting its own index, not per row on the prediction's basis to
the row's own target date, and pulls IPython and seaborn into the nightly run. Its figures are the
reference in tests/test_signals_library.py (IC per evening, quintile means).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
import statsmodels.api as sm

from ldtm_core.accountability.ledger.fillback import HORIZONS
from ldtm_core.accountability.signals.rows import HORIZON_SESSIONS, as_dates

QUANTILES = 5
MIN_NAMES_IC = 3  # a rank correlation of two names is always +-1


def grid(rows: pd.DataFrame, values: list[str]) -> list[pd.DataFrame]:
    """Columns of the rows frame as evenings x tickers matrices (one row per ticker and evening, as the
    board's rule guarantees), built by integer indexing on the codes `with_returns` set: a pivot per
    matrix was most of the report's time."""
    _, day_first, day_at = np.unique(rows["day_code"].to_numpy(), return_index=True, return_inverse=True)
    _, name_first, name_at = np.unique(rows["name_code"].to_numpy(), return_index=True, return_inverse=True)
    index = pd.Index(as_dates(rows["run_date"].to_numpy()[day_first]), name="run_date")
    columns = pd.Index([str(t) for t in rows["ticker"].take(name_first)], name="ticker")
    out = []
    for v in values:
        m = np.full((len(index), len(columns)), np.nan)
        m[day_at, name_at] = rows[v].to_numpy(dtype=float)
        out.append(pd.DataFrame(m, index=index, columns=columns))
    return out


def matrices(rows: pd.DataFrame, horizon: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(predicted, realised) returns as evenings x tickers, NaN wherever either is missing."""
    filled = rows[np.isfinite(rows[f"real_{horizon}"].to_numpy(dtype=float))]
    pred, real = grid(filled, [f"pred_{horizon}", f"real_{horizon}"])
    both = pred.notna() & real.notna()
    return pred.where(both), real.where(both)


def _rowwise_pearson(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    ok = np.isfinite(a) & np.isfinite(b)
    n = ok.sum(axis=1)
    a0, b0 = np.where(ok, a, 0.0), np.where(ok, b, 0.0)
    ma = a0.sum(axis=1) / np.maximum(n, 1)
    mb = b0.sum(axis=1) / np.maximum(n, 1)
    da, db = np.where(ok, a - ma[:, None], 0.0), np.where(ok, b - mb[:, None], 0.0)
    num = (da * db).sum(axis=1)
    den = np.sqrt((da * da).sum(axis=1) * (db * db).sum(axis=1))
    with np.errstate(invalid="ignore", divide="ignore"):
        r = num / den
    return np.where((n >= MIN_NAMES_IC) & (den > 0), r, np.nan)


def ic_series(rows: pd.DataFrame, horizon: str) -> pd.DataFrame:
    """Per evening: `ic` (Spearman, average ranks for ties; NaN below 3 names or with constant ranks)
    and `names`, the tickers it stands on."""
    pred, real = matrices(rows, horizon)
    if pred.empty:
        return pd.DataFrame(columns=["run_date", "ic", "names"])
    ic = _rowwise_pearson(pred.rank(axis=1).to_numpy(), real.rank(axis=1).to_numpy())
    return pd.DataFrame({"run_date": pred.index, "ic": ic, "names": pred.notna().sum(axis=1).to_numpy()})


@dataclass(frozen=True)
class HacMean:
    """The mean of a series with its Newey-West standard error (statsmodels OLS on a constant)."""

    mean: float
    se: float
    t: float
    p_value: float  # two-sided, normal reference (statsmodels' HAC default)
    n: int
    lag: int


def hac_mean(values, lag: int) -> HacMean:
    """`sm.OLS(y, 1).fit(cov_type="HAC", maxlags=lag, use_correction=True)`: lag 0 is the plain
    heteroskedasticity-robust mean test. Fewer than 3 finite values: NaNs."""
    y = np.asarray(values, dtype=float)
    y = y[np.isfinite(y)]
    lag = max(int(lag), 0)
    if len(y) < 3 or np.all(y == y[0]):
        return HacMean(float(np.mean(y)) if len(y) else math.nan, math.nan, math.nan, math.nan, len(y), lag)
    fit = sm.OLS(y, np.ones(len(y))).fit(
        cov_type="HAC", cov_kwds={"maxlags": min(lag, len(y) - 1), "use_correction": True}
    )
    return HacMean(
        float(fit.params[0]), float(fit.bse[0]), float(fit.tvalues[0]), float(fit.pvalues[0]), len(y), lag
    )


def ic_summary(rows: pd.DataFrame, series_by_horizon: dict | None = None) -> pd.DataFrame:
    """One row per horizon: evenings with an IC, distinct target dates, mean IC, its standard deviation,
    IC IR, HAC t and p (lag h - 1), mean names per evening."""
    out = []
    for h in HORIZONS:
        series = series_by_horizon[h] if series_by_horizon else ic_series(rows, h)
        ic = series["ic"].to_numpy(dtype=float) if len(series) else np.array([])
        ic = ic[np.isfinite(ic)]
        test = hac_mean(ic, HORIZON_SESSIONS[h] - 1)
        sd = float(np.std(ic, ddof=1)) if len(ic) > 1 else math.nan
        filled = rows[np.isfinite(rows[f"real_{h}"].to_numpy(dtype=float))]
        out.append(
            {
                "horizon": h,
                "evenings": len(ic),
                "target_dates": int(filled[f"{h}_date"].nunique()),
                "mean_ic": test.mean,
                "ic_std": sd,
                "ic_ir": test.mean / sd if sd and sd > 0 else math.nan,
                "hac_t": test.t,
                "hac_p": test.p_value,
                "hac_lag": test.lag,
                "names_per_evening": float(series["names"].mean()) if len(series) else math.nan,
            }
        )
    return pd.DataFrame(out)


def quintile_labels(pred: np.ndarray, q: int = QUANTILES) -> np.ndarray:
    """Per row of an evenings x tickers array, each name's quantile 1..q of predicted return (NaN where
    missing): `pd.qcut(ranks, q)` as alphalens bins a factor, ties broken by order (never an error).
    Evenings with fewer than q names get no labels."""
    ranks = pd.DataFrame(pred).rank(axis=1, method="first").to_numpy()
    n = np.isfinite(pred).sum(axis=1)[:, None]
    with np.errstate(invalid="ignore"):
        # qcut's right-closed bins on ranks 1..n: bin = max(1, ceil(q (rank - 1) / (n - 1))), in integers.
        num = q * (np.nan_to_num(ranks, nan=1.0).astype(np.int64) - 1)
        den = np.maximum(n - 1, 1)
        label = np.maximum(1, -((-num) // den)).astype(float)
    return np.where(np.isfinite(ranks) & (n >= q), label, np.nan)


def quintile_returns(rows: pd.DataFrame, horizon: str, q: int = QUANTILES) -> pd.DataFrame:
    """Per evening, the mean realised return of each quantile (columns 1..q) and `spread` (top - bottom)."""
    pred, real = matrices(rows, horizon)
    if pred.empty:
        return pd.DataFrame(columns=[*range(1, q + 1), "spread"])
    labels = quintile_labels(pred.to_numpy(), q)
    values = real.to_numpy()
    out = {}
    for k in range(1, q + 1):
        inside = labels == k
        n = inside.sum(axis=1)
        total = np.where(inside, values, 0.0).sum(axis=1)
        out[k] = np.where(n > 0, total / np.maximum(n, 1), np.nan)
    frame = pd.DataFrame(out, index=pred.index)
    frame["spread"] = frame[q] - frame[1]
    return frame.dropna(how="all")


def quintile_summary(rows: pd.DataFrame, q: int = QUANTILES) -> pd.DataFrame:
    """One row per horizon: mean over evenings of each quantile's return (q1 lowest predicted), the
    top-minus-bottom spread with its HAC t (lag h - 1), and the evenings it stands on."""
    out = []
    for h in HORIZONS:
        per = quintile_returns(rows, h, q)
        spread = hac_mean(per["spread"].to_numpy(dtype=float) if len(per) else [], HORIZON_SESSIONS[h] - 1)
        row = {"horizon": h, "evenings": int(per["spread"].notna().sum()) if len(per) else 0}
        row.update({f"q{k}": float(per[k].mean()) if len(per) else math.nan for k in range(1, q + 1)})
        row.update({"spread": spread.mean, "spread_hac_t": spread.t, "spread_hac_p": spread.p_value})
        out.append(row)
    return pd.DataFrame(out)
