"""Market data: the `prices` table, fetched from the configured price source, and the `features`
computed from it (per ticker, fingerprinted)."""

import datetime as dt

import pandas as pd
from dagster import (
    AssetCheckResult,
    AssetCheckSeverity,
    AssetCheckSpec,
    AssetExecutionContext,
    BackfillPolicy,
    Config,
    Failure,
    MaterializeResult,
    MetadataValue,
    RetryRequested,
    asset,
)
from pydantic import Field

from ldtm_core.accountability.ledger.refill import refill_after_ingest
from ldtm_core.data import feature_store, ingest
from ldtm_core.data.calendar import is_session, latest_closed_session, latest_session_on_or_before
from ldtm_core.data.price_fetch import DEFAULT_OVERLAP_SESSIONS, fetch_prices
from ldtm_core.data.prices import price_summary
from ldtm_core.data.sources import SPEC_HELP, configured_spec, make_source
from ldtm_core.data.universe import resolve_tickers
from ldtm_core.errors import LDTMError

from ..metadata import records_table
from ..partition_steps import failing_as, partition_keys
from ..partitions import EVENING_TAG, ticker_partitions
from ..resources import AppDatabase, ArtifactStore

PARTITION_TAG = "dagster/partition"
# A source down for every ticker (the vendor or gateway): three more tries, 2, 4, 8 minutes apart, asked
# from the asset itself. Not a step RetryPolicy: that one also retried what fails the same way every
# time (a refused resource setting, bad config, bad data).
SOURCE_DOWN_RETRIES = 3
SOURCE_DOWN_WAIT_S = 120


class PricesConfig(Config):
    """Where prices come from: `source` as in LDTM_PRICE_SOURCE; empty = that variable, else synthetic."""

    source: str = Field("", description=f"{SPEC_HELP}; 'files' with `paths` ingests those files once")
    paths: list[str] = Field(default_factory=list, description="CSV/Parquet files when source is 'files'")
    start: str = Field("2018-01-02", description="first date for a ticker with no stored prices (YYYY-MM-DD)")
    end: str = Field(
        "", description="last date; empty = the run's evening partition, else the latest session in New York"
    )
    seed: int = Field(0, description="synthetic source: random seed")
    tickers: list[str] = Field(default_factory=list, description="subset of the universe; empty = all")
    allow_new: bool = Field(False, description="accept tickers outside the universe")
    overlap_sessions: int = Field(
        DEFAULT_OVERLAP_SESSIONS, description="sessions re-fetched before each ticker's last stored date"
    )
    refetch: bool = Field(False, description="fetch every ticker from `start`, not incrementally")
    force_reingest: bool = Field(
        False,
        description="overwrite stored history the source changed in a way no corporate action explains "
        "(default: that ticker is refused and named; LDTM_FORCE_REINGEST=1 does the same)",
    )


def _date(value: str, name: str) -> dt.date:
    try:
        return dt.date.fromisoformat(value)
    except ValueError:
        raise Failure(
            f"prices config: {name}={value!r} is not a date (YYYY-MM-DD)", allow_retries=False
        ) from None


def _end_date(context: AssetExecutionContext, config: PricesConfig) -> dt.date:
    """The configured end, else the evening this run is for (the nightly market run's tag, or an
    evening partition), else the latest session already closed in New York."""
    if config.end:
        return _date(config.end, "end")
    tags = context.run.tags if context.run else {}
    evening = tags.get(EVENING_TAG) or tags.get(PARTITION_TAG, "")
    try:
        day = dt.date.fromisoformat(evening)
    except ValueError:
        return latest_closed_session()
    return day if is_session(day) else latest_session_on_or_before(day)


@asset(group_name="market", kinds={"sql"})
def prices(
    context: AssetExecutionContext, config: PricesConfig, store: ArtifactStore, database: AppDatabase
) -> MaterializeResult:
    """Daily OHLCV per (ticker, XNYS session), fetched incrementally and upserted idempotently.

    Metadata carries the per-ticker outcome table: a ticker the source could not serve, or whose bars
    fail validation, is named with its reason and nothing of it is stored; the others are stored.
    """
    engine = database.engine(store)
    spec = configured_spec(config.source)
    try:
        universe = store.tickers()
        tickers = resolve_tickers(config.tickers or None, universe, allow_new=config.allow_new)
        if spec == "files":  # explicit files named in run config, ingested as given
            return _ingest_named_files(context, config, engine, tickers)
        end = _end_date(context, config)
        start = _date(config.start, "start")
        if start >= end:
            raise Failure(f"prices config: start {start} must be before end {end}", allow_retries=False)
        source = make_source(spec, seed=config.seed)
        report = fetch_prices(
            engine,
            source,
            tickers,
            first_start=start,
            end=end,
            overlap=config.overlap_sessions,
            universe=universe,
            allow_new=config.allow_new,
            refetch=config.refetch,
            force=config.force_reingest or None,  # None: LDTM_FORCE_REINGEST decides
        )
        refill_after_ingest(engine, report)
    except LDTMError as exc:
        raise Failure(f"prices: {exc}", allow_retries=False) from None
    outcome_rows = report.table()
    metadata = {
        "source": report.source,
        "end": str(report.end),
        "rows_read": report.rows,
        "rows_written": report.written,
        "tickers_ok": len(report.stored),
        "tickers_failed": len(report.failed),
        "outcomes": records_table(outcome_rows),
        "outcomes_md": MetadataValue.md(
            pd.DataFrame(outcome_rows).to_markdown(index=False) if outcome_rows else "_none_"
        ),
        **_summary_metadata(engine),
    }
    if report.files:
        metadata["files"] = records_table(report.files)
    _report_gaps(metadata, report.gaps)
    if report.source_down:
        # Nothing stored and every failure transient: worth another attempt, a few of them.
        first = report.failed[0]
        message = f"prices: source {report.source} unavailable: {first.ticker}: {first.reason}"
        if context.retry_number < SOURCE_DOWN_RETRIES:
            wait_s = SOURCE_DOWN_WAIT_S * 2**context.retry_number
            context.log.warning(f"{message}; trying again in {wait_s} s")
            raise RetryRequested(max_retries=SOURCE_DOWN_RETRIES, seconds_to_wait=wait_s)
        raise Failure(message, metadata=metadata, allow_retries=False)
    for o in report.failed:
        context.log.warning(f"prices: {o.ticker} not stored: {o.reason}")
    for f in report.rejected_files:
        context.log.warning(f"prices: file {f['file']} rejected: {f['error']}")
    context.log.info(
        f"prices from {report.source}: {len(report.stored)} tickers stored ({report.rows} rows read, "
        f"{report.written} inserted or changed), {len(report.failed)} failed"
    )
    return MaterializeResult(metadata=metadata)


def _report_gaps(metadata: dict, gaps: list) -> None:
    """Holes longer than LDTM_MAX_GAP_SESSIONS next to what was stored, in the metadata. The run log has
    each already: price_gaps warns on the `ldtm.ingest` logger, which dagster.yaml manages."""
    if gaps:
        metadata["price_gaps"] = MetadataValue.json([g.describe() for g in gaps[:50]])


def _summary_metadata(engine) -> dict:
    summary = price_summary(engine)
    return {
        "tickers": len(summary),
        "last_date": str(summary["last_date"].max()) if len(summary) else "",
        "summary": MetadataValue.md(summary.to_markdown(index=False) if len(summary) else "_no prices_"),
    }


def _ingest_named_files(context, config: PricesConfig, engine, tickers: list[str]) -> MaterializeResult:
    if not config.paths:
        raise Failure("prices config: source 'files' needs at least one path in `paths`", allow_retries=False)
    outcomes = ingest.ingest_files(engine, config.paths, tickers, allow_new=config.allow_new)
    refill_after_ingest(engine, *outcomes)
    files = [{"path": o.path, "rows": o.rows, "written": o.written, "error": o.error} for o in outcomes]
    metadata = {
        "source": "files",
        "rows_read": sum(o.rows for o in outcomes),
        "rows_written": sum(o.written for o in outcomes),
        "files": records_table(files),
        **_summary_metadata(engine),
    }
    _report_gaps(metadata, [g for o in outcomes for g in o.gaps])
    bad = [f for f in files if f["error"]]
    if bad:
        # Good files are stored (each in its own transaction); the bad ones wrote nothing.
        raise Failure(
            f"prices: {len(bad)} file(s) rejected; first: {bad[0]['error']}",
            metadata=metadata,
            allow_retries=False,
        )
    context.log.info(
        f"prices: {metadata['rows_read']} rows read, {metadata['rows_written']} inserted or changed"
    )
    return MaterializeResult(metadata=metadata)


FEATURE_CHECKS = {
    "features_current": "same last date and price fingerprint as the ticker's prices now",
    "features_finite": "no NaN or inf in any stored row (the warm-up rows are not stored)",
    "features_rsi_in_range": "RSI-14 within [0, 100] on every stored row",
    "features_match_recomputation": "stored values equal a fresh recomputation from prices on a sample of rows",
    "features_library_current": "the price_features library's stored rows come from the ticker's prices now",
    "features_library_match_recomputation": "stored price_features rows equal a recomputation on a sample of rows",
}


@asset(
    partitions_def=ticker_partitions,
    backfill_policy=BackfillPolicy.single_run(),
    deps=[prices],
    group_name="market",
    kinds={"sql"},
    check_specs=[AssetCheckSpec(name, asset="features", blocking=True) for name in FEATURE_CHECKS],
)
def features(
    context: AssetExecutionContext, store: ArtifactStore, database: AppDatabase
) -> MaterializeResult:
    """The stored features (the reference recipe's) per (ticker, session) in the `features` table, and the
    `price_features` library (the tabular recipes' inputs) in `price_feature_rows`, each with the
    fingerprint of the prices they came from. Training, backtests and inference use them only while that
    fingerprint still matches the prices (a model's other registered features are computed from the same
    prices); a ticker whose prices did not change is left as it is, one with only new sessions gets just
    those rows."""
    engine = database.engine(store)
    tickers = partition_keys(context, "features")
    with failing_as("features"):
        outcomes = feature_store.build_features(engine, tickers)
        checks = feature_store.check_features(engine, tickers)
    for o in outcomes:
        context.add_asset_metadata(_partition_metadata(o), partition_key=o.ticker)
        if o.status in ("built", "no prices") and o.reason:
            context.log.info(f"features {o.ticker}: {o.status}: {o.reason}")
        if o.library == "refused":
            context.log.warning(f"price features {o.ticker}: refused: {o.library_reason}")
    summary = [
        {
            "ticker": o.ticker,
            "status": o.status,
            "rows": o.rows,
            "rows_written": o.rows_written,
            "price_features": o.library,
            "price_feature_rows_written": o.library_rows_written,
            "first_date": str(o.first_date or ""),
            "last_date": str(o.last_date or ""),
            "reason": o.reason,
        }
        for o in outcomes
    ]
    results = {f"features_{name}": r for name, r in checks.items()}
    return MaterializeResult(
        metadata={
            "summary": records_table(summary),
            **{s: sum(o.status == s for o in outcomes) for s in ("built", "appended", "current")},
            "rows_written": sum(o.rows_written for o in outcomes),
            "price_feature_rows_written": sum(o.library_rows_written for o in outcomes),
        },
        check_results=[
            AssetCheckResult(
                check_name=name,
                passed=r.passed,
                severity=AssetCheckSeverity.ERROR,
                metadata={"checked": r.checked, "problems": MetadataValue.json(r.problems)},
                description=FEATURE_CHECKS[name],
            )
            for name, r in results.items()
        ],
    )


def _partition_metadata(o: feature_store.BuildOutcome) -> dict:
    stats = [{"feature": name, **s} for name, s in o.stats.items()]
    return {
        "status": o.status,
        "rows": o.rows,
        "first_date": str(o.first_date or ""),
        "last_date": str(o.last_date or ""),
        "warmup_rows": o.warmup_rows,
        "price_rows": o.price_rows,
        "fingerprint": o.fingerprint.token if o.fingerprint else "",
        "price_features": f"{o.library}: {o.library_reason}" if o.library_reason else o.library,
        "feature_stats": records_table(stats),
    }
