"""Signal performance, part 2: cross-sectional rank IC and quintile returns (SPEC §15, STATS_NOTES "Returns").

Per evening and horizon, across the tickers with a filled row: the Spearman correlation of predicted vs
realised return (the IC), and the mean realised return of each quintile of predicted return. Over the
evenings: mean IC, IC IR (mean / standard deviation, per evening) and the overlap-aware t-test of the
mean (`scoring.hac.mean_test`): consecutive evenings' week and month targets overlap and predictions
are persistent, so the daily ICs are autocorrelated; below 10 independent target periods there is no
p-value ("too short to test").

Hand-written because the library does not fit the rows (docs/architecture.md): alphalens-reloaded computes
forward returns from a price matrix by shifting its own index, not per row on the prediction's basis to
the row's own target date, and pulls IPython and seaborn into the nightly run. Its figures are the
reference in tests/accountability/signals/test_signals_library.py (IC per evening, quintile means).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ldtm_core.accountability.ledger.fillback import HORIZONS
from ldtm_core.accountability.signals.rows import HORIZON_SESSIONS, as_dates
from ldtm_core.scoring import hac

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


def rowwise_pearson(a: np.ndarray, b: np.ndarray) -> np.ndarray:
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
    ic = rowwise_pearson(pred.rank(axis=1).to_numpy(), real.rank(axis=1).to_numpy())
    return pd.DataFrame({"run_date": pred.index, "ic": ic, "names": pred.notna().sum(axis=1).to_numpy()})


def overlap_test_columns(test: hac.MeanTest, prefix: str = "") -> dict:
    """The t-test's columns of a summary row: t, p (NaN when untested), its Student t degrees of freedom,
    the independent target periods the evenings span, and why there is no p-value when there is none."""
    return {
        f"{prefix}hac_t": test.t,
        f"{prefix}hac_p": test.p_two_sided,
        f"{prefix}hac_dof": test.dof,
        f"{prefix}periods": test.periods,
        f"{prefix}untested": test.why_untested(),
    }


def ic_summary(rows: pd.DataFrame, series_by_horizon: dict | None = None) -> pd.DataFrame:
    """One row per horizon: evenings with an IC, distinct target dates, independent target periods,
    mean IC, its standard deviation, IC IR, the overlap-aware t and p, mean names per evening."""
    out = []
    for h in HORIZONS:
        series = series_by_horizon[h] if series_by_horizon else ic_series(rows, h)
        ic = series["ic"].to_numpy(dtype=float) if len(series) else np.array([])
        ic = ic[np.isfinite(ic)]
        test = hac.mean_test(ic, HORIZON_SESSIONS[h])
        sd = float(np.std(ic, ddof=1)) if len(ic) > 1 else math.nan
        filled = rows[np.isfinite(rows[f"real_{h}"].to_numpy(dtype=float))]
        row = {
            "horizon": h,
            "evenings": len(ic),
            "target_dates": int(filled[f"{h}_date"].nunique()),
            "mean_ic": test.mean,
            "ic_std": sd,
            "ic_ir": test.mean / sd if sd and sd > 0 else math.nan,
        }
        row.update(overlap_test_columns(test))
        row["names_per_evening"] = float(series["names"].mean()) if len(series) else math.nan
        out.append(row)
    return pd.DataFrame(out)


def quintile_labels(pred: np.ndarray, q: int = QUANTILES) -> np.ndarray:
    """Per row of an evenings x tickers array, each name's quantile 1..q of predicted return (NaN where
    missing): `pd.qcut(ranks, q)` as alphalens bins a factor, ties broken by order (never an error).
    Evenings with fewer than q names, or whose predictions all tie, get no labels."""
    ranks = pd.DataFrame(pred).rank(axis=1, method="first").to_numpy()
    n = np.isfinite(pred).sum(axis=1)[:, None]
    # An evening whose predictions all tie ranks nothing: "first" would sort it by ticker.
    with np.errstate(invalid="ignore"):
        spread = np.nanmax(np.where(np.isfinite(pred), pred, -np.inf), axis=1) - np.nanmin(
            np.where(np.isfinite(pred), pred, np.inf), axis=1
        )
    n = np.where((spread > 0)[:, None], n, 0)
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
    top-minus-bottom spread with its overlap-aware t-test, and the evenings it stands on."""
    out = []
    for h in HORIZONS:
        per = quintile_returns(rows, h, q)
        spread = hac.mean_test(per["spread"].to_numpy(dtype=float) if len(per) else [], HORIZON_SESSIONS[h])
        row = {"horizon": h, "evenings": int(per["spread"].notna().sum()) if len(per) else 0}
        row.update({f"q{k}": float(per[k].mean()) if len(per) else math.nan for k in range(1, q + 1)})
        row["spread"] = spread.mean
        row.update(overlap_test_columns(spread, "spread_"))
        out.append(row)
    return pd.DataFrame(out)


def held_summaries(rows: pd.DataFrame, label: str) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """The next-day prediction scored against the return the books earn (`held_return`, set by
    signals.execution.with_held): (IC per evening, the IC row, the quintile row), `horizon` = `label`.
    Scored as the next-day row is (one session held, no overlap), through the same summaries."""
    others = {f"real_{h}": np.nan for h in HORIZONS if h != "next_day"}  # only next_day is computed
    frame = rows.assign(real_next_day=rows["held_return"], next_day_date=rows["held_exit"], **others)
    daily = ic_series(frame, "next_day")
    ic = ic_summary(frame, {h: daily if h == "next_day" else daily.iloc[:0] for h in HORIZONS})
    quintiles = quintile_summary(frame)
    return (
        daily,
        ic[ic["horizon"] == "next_day"].assign(horizon=label),
        quintiles[quintiles["horizon"] == "next_day"].assign(horizon=label),
    )
