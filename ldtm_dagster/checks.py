"""Asset checks on `prices` (data quality). Checks on snapshots and backtests are emitted by those
assets themselves (`one_per_ticker`, `audit_chain_intact`, `no_leakage`) because they need the run's
own results.

`prices_ohlc_consistent` is blocking: a broken bar would poison features for training and
inference downstream in the same run. Missing sessions only warn: a late vendor file is common and
the nightly run should still predict for the tickers that are complete.

`prices_latest_session_complete` (freshness) warns too, deliberately not blocking: a blocking check
that fails stops every downstream asset of the run, so one late ticker would cost the whole universe
its evening. Instead predict skips each stale ticker by name ("no price for X on D") and a rerun after
the bar arrives fills it in; this check names the stale tickers and why, up front.
"""

from dagster import (
    AssetCheckExecutionContext,
    AssetCheckResult,
    AssetCheckSeverity,
    MetadataValue,
    asset_check,
)

from ldtm_core.data.freshness import freshness
from ldtm_core.data.price_moves import large_moves, threshold_from_env
from ldtm_core.data.prices import quality_report

from .resources import AppDatabase, ArtifactStore


@asset_check(asset="prices", blocking=True, description="low <= open, close <= high and low > 0 on every row")
def prices_ohlc_consistent(
    context: AssetCheckExecutionContext, store: ArtifactStore, database: AppDatabase
) -> AssetCheckResult:
    report = quality_report(database.engine(store), store.tickers())
    return AssetCheckResult(
        passed=report.ohlc_ok,
        severity=AssetCheckSeverity.ERROR,
        metadata={
            "rows_checked": report.rows_checked,
            "tickers_with_bad_rows": len(report.bad_bars),
            "first_bad_dates": MetadataValue.json(report.bad_bars),
        },
    )


@asset_check(asset="prices", description="no XNYS session missing between each ticker's first and last row")
def prices_sessions_complete(
    context: AssetCheckExecutionContext, store: ArtifactStore, database: AppDatabase
) -> AssetCheckResult:
    report = quality_report(database.engine(store), store.tickers())
    missing = report.missing_sessions
    return AssetCheckResult(
        passed=report.sessions_ok,
        severity=AssetCheckSeverity.WARN,
        metadata={
            "missing_sessions": sum(len(v) for v in missing.values()),
            "tickers_with_gaps": len(missing),
            "examples": MetadataValue.json({t: d[:5] for t, d in missing.items()}),
        },
    )


@asset_check(
    asset="prices",
    description="no one-day close move beyond LDTM_MAX_DAILY_MOVE_PCT (default 40%) that no recorded "
    "corporate action explains",
)
def prices_no_unexplained_jumps(
    context: AssetCheckExecutionContext, store: ArtifactStore, database: AppDatabase
) -> AssetCheckResult:
    # A move on an ex-date that its recorded corporate action explains is not flagged (large_moves' default).
    threshold = threshold_from_env()
    moves = large_moves(database.engine(store), store.tickers(), threshold_pct=threshold)
    return AssetCheckResult(
        passed=not moves,
        severity=AssetCheckSeverity.WARN,
        metadata={
            "threshold_pct": threshold,
            "flagged_moves": len(moves),
            "moves": MetadataValue.json([m.describe() for m in moves[:50]]),
        },
    )


@asset_check(
    asset="prices",
    description="every universe ticker has the latest session's bar (warns and names the stale ones; "
    "snapshots skip them by name and a rerun fills them in)",
)
def prices_latest_session_complete(
    context: AssetCheckExecutionContext, store: ArtifactStore, database: AppDatabase
) -> AssetCheckResult:
    report = freshness(database.engine(store), store.tickers())
    return AssetCheckResult(
        passed=report.ok,
        severity=AssetCheckSeverity.WARN,
        metadata={
            "session": str(report.session or ""),
            "fresh_tickers": len(report.fresh),
            "stale_tickers": len(report.stale),
            "stale": MetadataValue.json(dict(list(report.stale.items())[:100])),
        },
    )


# Every check on `prices`, for the definitions and the demo alike.
PRICE_CHECKS = [
    prices_ohlc_consistent,
    prices_sessions_complete,
    prices_no_unexplained_jumps,
    prices_latest_session_complete,
]
