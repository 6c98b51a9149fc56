"""Asset checks on `prices` (data quality) and on `leaderboard` (model decay). Checks on snapshots and backtests are emitted by those
assets themselves (`one_per_ticker`, `audit_chain_intact`, `no_leakage`) because they need the run's
own results.

`prices_ohlc_consistent` is blocking: a broken bar would poison features for training and
inference downstream in the same run. Missing sessions only warn: a late vendor file is common and
the nightly run should still predict for the tickers that are complete.

`prices_latest_session_complete` (freshness) warns too, deliberately not blocking: a blocking check
that fails stops every downstream asset of the run, so one late ticker would cost the whole universe
its evening. Instead predict skips each stale ticker by name ("no price for X on D") and a rerun after
the bar arrives fills it in; this check names the stale tickers and why, up front.

`leaderboard_decay` warns (never blocks: a decaying model still predicts until an operator rolls it back
or a retrain replaces it) and names each ticker whose published production record (across model changes,
each row against the promise of the model that made it, its backtest accuracy shrunk for the gate's
selection; the table shows both) fell below what was promised
(ldtm_core.accountability.decay.decay), with the drift of its features beside it. Each alarm episode (an
unbroken stretch in WARN, named by its first evening) is posted to the notification webhook once: the
keys already alarmed are kept in the check's own metadata and read back from its recent evaluations.
"""

from dagster import (
    AssetCheckExecutionContext,
    AssetCheckKey,
    AssetCheckResult,
    AssetCheckSeverity,
    AssetKey,
    MetadataValue,
    asset_check,
)
from dagster._core.storage.asset_check_execution_record import AssetCheckExecutionRecordStatus

from ldtm_core.accountability.decay import decay
from ldtm_core.config import setting
from ldtm_core.data.freshness import freshness
from ldtm_core.data.price_moves import large_moves, threshold_from_env
from ldtm_core.data.prices import quality_report

from .metadata import records_table
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


DECAY_KEYS = "alarm_keys"


ALARM_HISTORY = 60  # earlier evaluations whose alarm keys count as notified (about three months of nights)


def _alarmed_before(context: AssetCheckExecutionContext, key: AssetCheckKey) -> set[str] | None:
    """The alarm keys of this check's recent evaluations (None: it never ran, or none are readable). Keys
    name an episode by its first evening, so one that lasts is found in any of them, also after a night
    that checked other tickers."""
    done = {AssetCheckExecutionRecordStatus.SUCCEEDED, AssetCheckExecutionRecordStatus.FAILED}
    history = context.instance.event_log_storage.get_asset_check_execution_history(
        key, limit=ALARM_HISTORY, status=done
    )
    keys: set[str] | None = None
    for record in history:
        value = record.evaluation.metadata.get(DECAY_KEYS) if record.evaluation else None
        if value is not None and isinstance(value.value, list):
            keys = (keys or set()) | set(value.value)
    return keys


@asset_check(
    asset="leaderboard",
    description="no ticker's published direction record has dropped significantly below what its models' "
    "gate reports promised, or below always-up on the same evenings (Bernoulli CUSUM; warns and names the "
    "decaying tickers, posts each new alarm to the webhook; PSI of its input features beside it)",
)
def leaderboard_decay(
    context: AssetCheckExecutionContext, store: ArtifactStore, database: AppDatabase
) -> AssetCheckResult:
    report = decay.check(database.engine(store), store.tickers())
    bad = report.decaying
    keys = sorted(t.alarm_key for t in bad)
    before = _alarmed_before(context, AssetCheckKey(AssetKey("leaderboard"), "leaderboard_decay"))
    new = [t for t in bad if before is None or t.alarm_key not in before]
    result = decay.notify_decay(report, setting("LDTM_NOTIFY_WEBHOOK_URL"), new)
    if result is not None and not result.posted and result.error:
        context.log.warning(f"decay alert not delivered: {result.error}")
    rows = report.rows()
    return AssetCheckResult(
        passed=not bad,
        severity=AssetCheckSeverity.WARN,
        description=report.summary()[:2000],
        metadata={
            "decaying": MetadataValue.json([t.ticker for t in bad]),
            "checked": len(report.tickers),
            "notified": MetadataValue.json([t.ticker for t in new]),
            DECAY_KEYS: MetadataValue.json(keys),
            "delta_points": report.settings.delta * 100,
            "designed_arl0_sessions": report.settings.arl0,
            "table": records_table([{k: r[k] for k in decay.TABLE_COLUMNS} for r in rows]),
        },
    )


# Every check on `prices`, for the definitions and the demo alike.
PRICE_CHECKS = [
    prices_ohlc_consistent,
    prices_sessions_complete,
    prices_no_unexplained_jumps,
    prices_latest_session_complete,
]
# Every asset check of the code location.
ALL_CHECKS = [*PRICE_CHECKS, leaderboard_decay]
