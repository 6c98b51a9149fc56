"""Market data: the `prices` table."""

import datetime as dt
from typing import Literal

import pandas as pd
from dagster import AssetExecutionContext, Config, Failure, MaterializeResult, MetadataValue, asset
from pydantic import Field

from ldtm_core import ingest
from ldtm_core.calendar import latest_session_on_or_before
from ldtm_core.errors import LDTMError
from ldtm_core.prices import price_summary
from ldtm_core.universe import resolve_tickers

from ..metadata import records_table
from ..partitions import MARKET_TZ
from ..resources import AppDatabase, ArtifactStore


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
