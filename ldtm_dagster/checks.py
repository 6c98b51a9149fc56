"""Asset checks on `prices` (data quality). Checks on snapshots and backtests are emitted by those
assets themselves (`one_per_ticker`, `audit_chain_intact`, `no_leakage`) because they need the run's
own results.

`prices_ohlc_consistent` is blocking: a broken bar would poison features for training and
inference downstream in the same run. Missing sessions only warn: a late vendor file is common and
the nightly run should still predict for the tickers that are complete.
"""

import numpy as np
from dagster import (
    AssetCheckExecutionContext,
    AssetCheckResult,
    AssetCheckSeverity,
    MetadataValue,
    asset_check,
)

from ldtm_core.calendar import sessions_between
from ldtm_core.prices import load_prices

from .resources import AppDatabase, ArtifactStore


def _frames(store: ArtifactStore, database: AppDatabase) -> dict:
    return {t: f for t, f in load_prices(database.engine(store), store.tickers()).items() if len(f)}


@asset_check(asset="prices", blocking=True, description="low <= open, close <= high and low > 0 on every row")
def prices_ohlc_consistent(
    context: AssetCheckExecutionContext, store: ArtifactStore, database: AppDatabase
) -> AssetCheckResult:
    bad: dict[str, list[str]] = {}
    rows = 0
    for ticker, f in _frames(store, database).items():
        rows += len(f)
        o, h, lo, c = (f[k].to_numpy(dtype=np.float64) for k in ("open", "high", "low", "close"))
        broken = (lo > np.minimum(o, c)) | (h < np.maximum(o, c)) | (lo <= 0) | ~np.isfinite(o + h + lo + c)
        if broken.any():
            bad[ticker] = [str(d) for d in f["date"][broken].head(5)]
    return AssetCheckResult(
        passed=not bad,
        severity=AssetCheckSeverity.ERROR,
        metadata={
            "rows_checked": rows,
            "tickers_with_bad_rows": len(bad),
            "first_bad_dates": MetadataValue.json(bad),
        },
    )


@asset_check(asset="prices", description="no XNYS session missing between each ticker's first and last row")
def prices_sessions_complete(
    context: AssetCheckExecutionContext, store: ArtifactStore, database: AppDatabase
) -> AssetCheckResult:
    missing: dict[str, int] = {}
    examples: dict[str, list[str]] = {}
    for ticker, f in _frames(store, database).items():
        expected = set(sessions_between(f["date"].iloc[0], f["date"].iloc[-1]))
        gap = sorted(expected - set(f["date"]))
        if gap:
            missing[ticker] = len(gap)
            examples[ticker] = [str(d) for d in gap[:5]]
    return AssetCheckResult(
        passed=not missing,
        severity=AssetCheckSeverity.WARN,
        metadata={
            "missing_sessions": sum(missing.values()),
            "tickers_with_gaps": len(missing),
            "examples": MetadataValue.json(examples),
        },
    )
