"""Signal performance, residual IC and churn: is the rank skill more than market and sector exposure?

Residual IC per evening and horizon: the Spearman correlation of predicted returns with realised returns
after the market and the sector are taken out, in two steps across the evening's names:
  1. market: r_i - beta_i m, m the equal-weight mean of the evening's realised returns (the universe of
     names with a filled row), beta_i the name's slope on the equal-weight next-day return over the
     STATS_WINDOW evenings before this one (only returns already known that evening; 1 until it has
     MIN_BETA_EVENINGS of them);
  2. sector: minus the mean of that residual over the name's sector that evening (the shipped, editable
     map `ldtm_core/universe/sectors.csv`; a name missing from it is its own sector "unmapped").
Subtracting the same m from every name would leave the ranks, and so the IC, unchanged: the betas are
what make the market step bite. Churn (Numerai's): 1 - the Spearman correlation of consecutive
evenings' predictions over the names present on both, per horizon. Each mean is tested by the one
overlap-aware test (`scoring.hac.mean_test`).
"""

from __future__ import annotations

import csv
import math
from importlib import resources

import numpy as np
import pandas as pd

from ldtm_core.accountability.ledger.fillback import HORIZONS
from ldtm_core.accountability.signals.ic import grid, matrices, overlap_test_columns, rowwise_pearson
from ldtm_core.accountability.signals.rows import HORIZON_SESSIONS
from ldtm_core.errors import InputError
from ldtm_core.scoring import hac

STATS_WINDOW = 60  # evenings of next-day returns a beta is estimated on
MIN_BETA_EVENINGS = 20
UNMAPPED = "unmapped"
SECTOR_SOURCE = "ldtm_core/universe/sectors.csv (GICS sectors, hand-written; edit to your classification)"


def load_sectors(path: str | None = None) -> dict[str, str]:
    """{ticker: sector} from the shipped map or a CSV with columns ticker, sector."""
    text = (
        resources.files("ldtm_core").joinpath("universe", "sectors.csv").read_text()
        if path is None
        else open(path, encoding="utf-8-sig").read()  # noqa: SIM115
    )
    lines = [line for line in text.splitlines() if line.strip() and not line.startswith("#")]
    out: dict[str, str] = {}
    for i, row in enumerate(csv.DictReader(lines), start=2):
        ticker, sector = (row.get("ticker") or "").strip().upper(), (row.get("sector") or "").strip()
        if not ticker or not sector:
            raise InputError(f"{path or SECTOR_SOURCE}: row {i} needs a ticker and a sector, got {row}")
        out[ticker] = sector
    return out


def _rank(a: np.ndarray) -> np.ndarray:
    return pd.DataFrame(a).rank(axis=1).to_numpy()


def trailing_betas(rows: pd.DataFrame) -> pd.DataFrame:
    """Evenings x tickers: each name's slope on the equal-weight next-day return over the STATS_WINDOW
    evenings before (a next-day return of an earlier evening is known by this one's close)."""
    filled = rows[np.isfinite(rows["real_next_day"].to_numpy(dtype=float))]
    r = grid(filled, ["real_next_day"])[0] if len(filled) else pd.DataFrame()
    if r.empty:
        return r
    ok = r.notna()
    y = r.fillna(0.0)
    x = ok.mul(r.mean(axis=1), axis=0)  # the market's return, where the name has one

    def trailing(frame: pd.DataFrame) -> pd.DataFrame:
        # Shifted one evening: the beta used on evening t stands on evenings before t only.
        return frame.astype(float).shift(1).rolling(STATS_WINDOW, min_periods=1).sum()

    n, sx, sy, sxy, sxx = (trailing(f) for f in (ok, x, y, x * y, x * x))
    with np.errstate(invalid="ignore", divide="ignore"):
        cov = sxy / n - sx * sy / (n * n)
        var = sxx / n - (sx / n) ** 2
        beta = cov / var.where(var > 0)
    return beta.where(n >= MIN_BETA_EVENINGS).fillna(1.0)


def residual_matrices(
    rows: pd.DataFrame, horizon: str, sectors: dict[str, str]
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """(predicted, market residual, market and sector residual) as evenings x tickers."""
    pred, real = matrices(rows, horizon)
    if pred.empty:
        return pred, real, real
    beta = trailing_betas(rows).reindex(index=real.index, columns=real.columns).fillna(1.0)
    market = real.mean(axis=1)
    resid = real - beta.mul(market, axis=0)
    groups = pd.Series([sectors.get(t, UNMAPPED) for t in resid.columns], index=resid.columns)
    sector_mean = resid.T.groupby(groups).transform("mean").T
    return pred, resid, resid - sector_mean


def churn_series(rows: pd.DataFrame, horizon: str) -> pd.Series:
    """Per evening after the first: 1 - Spearman(predictions, the previous evening's) over shared names."""
    pred = grid(rows, [f"pred_{horizon}"])[0] if len(rows) else pd.DataFrame()
    if len(pred) < 2:
        return pd.Series(dtype=float)
    now, before = pred.to_numpy()[1:], pred.to_numpy()[:-1]
    both = np.isfinite(now) & np.isfinite(before)
    now, before = np.where(both, now, np.nan), np.where(both, before, np.nan)
    return pd.Series(1.0 - rowwise_pearson(_rank(now), _rank(before)), index=pred.index[1:])


def residual_summary(rows: pd.DataFrame, sectors: dict[str, str] | None = None) -> pd.DataFrame:
    """One row per horizon: mean raw, market-residual and sector-residual IC, the residual's test, and
    the mean churn of the predictions."""
    sectors = load_sectors() if sectors is None else sectors
    out = []
    for h in HORIZONS:
        pred, market, sector = residual_matrices(rows, h, sectors)
        row: dict = {"horizon": h}
        if pred.empty:
            row.update(mean_ic_market=math.nan, mean_ic_sector=math.nan, mean_churn=math.nan)
            row.update(overlap_test_columns(hac.mean_test([], HORIZON_SESSIONS[h]), "sector_"))
            out.append(row)
            continue
        p = _rank(pred.to_numpy())
        ic_market = rowwise_pearson(p, _rank(np.where(np.isfinite(p), market.to_numpy(), np.nan)))
        ic_sector = rowwise_pearson(p, _rank(np.where(np.isfinite(p), sector.to_numpy(), np.nan)))
        churn = churn_series(rows, h)
        row["mean_ic_market"] = float(np.nanmean(ic_market)) if np.isfinite(ic_market).any() else math.nan
        test = hac.mean_test(ic_sector, HORIZON_SESSIONS[h])
        row["mean_ic_sector"] = test.mean
        row.update(overlap_test_columns(test, "sector_"))
        row["mean_churn"] = float(churn.mean()) if len(churn) else math.nan
        out.append(row)
    return pd.DataFrame(out)
