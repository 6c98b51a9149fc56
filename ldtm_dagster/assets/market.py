"""Market data: the `prices` table and the `features` computed from it (per ticker, fingerprinted)."""

import datetime as dt
from typing import Literal

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
    asset,
)
from pydantic import Field

from ldtm_core import feature_store, ingest
from ldtm_core.calendar import latest_session_on_or_before
from ldtm_core.errors import LDTMError
from ldtm_core.prices import price_summary
from ldtm_core.universe import resolve_tickers

from ..metadata import records_table
from ..partitions import MARKET_TZ, ticker_partitions
from ..resources import AppDatabase, ArtifactStore
from ..steps import failing_as


class PricesConfig(Config):
    """Where prices come from. Synthetic (offline, deterministic) unless `source: files`."""

    source: Literal["synthetic", "files"] = "synthetic"
    paths: list[str] = Field(default_factory=list, description="CSV/Parquet files when source is 'files'")
    start: str = Field("2018-01-02", description="first date of the synthetic range (YYYY-MM-DD)")
    end: str = Field("", description="last date of the synthetic range; empty = today in New York")
    seed: int = 0
    tickers: list[str] = Field(default_factory=list, description="subset of the universe; empty = all")
    allow_new: bool = Field(False, description="files: accept tickers outside the universe")


def _date(value: str, name: str) -> dt.date:
    try:
        return dt.date.fromisoformat(value)
    except ValueError:
        raise Failure(f"prices config: {name}={value!r} is not a date (YYYY-MM-DD)") from None


@asset(group_name="market", kinds={"sql"})
def prices(
    context: AssetExecutionContext, config: PricesConfig, store: ArtifactStore, database: AppDatabase
) -> MaterializeResult:
    """Daily OHLCV per (ticker, XNYS session), upserted idempotently: re-running changes nothing."""
    engine = database.engine(store)
    try:
        tickers = resolve_tickers(config.tickers or None, store.tickers(), allow_new=config.allow_new)
        if config.source == "files":
            if not config.paths:
                raise Failure("prices config: source 'files' needs at least one path in `paths`")
            outcomes = ingest.ingest_files(engine, config.paths, tickers, allow_new=config.allow_new)
            files = [
                {"path": o.path, "rows": o.rows, "written": o.written, "error": o.error} for o in outcomes
            ]
            rows, written = sum(o.rows for o in outcomes), sum(o.written for o in outcomes)
        else:
            today = pd.Timestamp.now(tz=MARKET_TZ).date()
            end = _date(config.end, "end") if config.end else latest_session_on_or_before(today)
            start = _date(config.start, "start")
            if start >= end:
                raise Failure(f"prices config: start {start} must be before end {end}")
            result = ingest.ingest_synthetic(engine, tickers, start, end, config.seed)
            files, rows, written = [], result.rows, result.written
    except LDTMError as exc:
        raise Failure(f"prices: {exc}") from None
    summary = price_summary(engine)
    metadata = {
        "source": config.source,
        "rows_read": rows,
        "rows_written": written,
        "tickers": len(summary),
        "last_date": str(summary["last_date"].max()) if len(summary) else "",
        "summary": MetadataValue.md(summary.to_markdown(index=False) if len(summary) else "_no prices_"),
    }
    if files:
        metadata["files"] = records_table(files)
    bad = [f for f in files if f["error"]]
    if bad:
        # Good files are stored (each in its own transaction); the bad ones wrote nothing.
        raise Failure(f"prices: {len(bad)} file(s) rejected; first: {bad[0]['error']}", metadata=metadata)
    context.log.info(f"prices: {rows} rows read, {written} inserted or changed")
    return MaterializeResult(metadata=metadata)


FEATURE_CHECKS = {
    "features_current": "same last date and price fingerprint as the ticker's prices now",
    "features_finite": "no NaN or inf in any stored row (the warm-up rows are not stored)",
    "features_rsi_in_range": "RSI-14 within [0, 100] on every stored row",
    "features_match_recomputation": "stored values equal a fresh recomputation from prices on a sample of rows",
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
    """The 11 features per (ticker, session) in the `features` table, with the fingerprint of the prices
    they came from. Training, backtests and inference use them only while that fingerprint still
    matches the prices; a ticker whose prices did not change is left as it is, one with only new
    sessions gets just those rows."""
    engine = database.engine(store)
    tickers = list(context.partition_keys)
    with failing_as("features"):
        outcomes = feature_store.build_features(engine, tickers)
        checks = feature_store.check_features(engine, tickers)
    for o in outcomes:
        context.add_asset_metadata(_partition_metadata(o), partition_key=o.ticker)
        if o.status in ("built", "no prices") and o.reason:
            context.log.info(f"features {o.ticker}: {o.status}: {o.reason}")
    summary = [
        {
            "ticker": o.ticker,
            "status": o.status,
            "rows": o.rows,
            "rows_written": o.rows_written,
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
        "feature_stats": records_table(stats),
    }
