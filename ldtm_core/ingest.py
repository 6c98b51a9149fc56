"""Writing prices: validated frames upserted in one transaction each (SPEC §2).

Re-ingesting identical rows changes nothing; an overlapping newer file updates only rows whose values
differ. A frame that fails validation writes nothing.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

import pandas as pd
from sqlalchemy import Engine

from .db import run_in_transaction, upsert
from .schema import prices

VALUE_COLUMNS = ["open", "high", "low", "close", "adj_close", "volume"]


@dataclass
class IngestResult:
    source: str
    tickers: int
    rows: int
    written: int  # rows inserted or changed


def _records(df: pd.DataFrame, source: str) -> list[dict]:
    now = dt.datetime.now(dt.UTC)
    out = df[["ticker", "date", *VALUE_COLUMNS]].copy()
    out["date"] = pd.to_datetime(out["date"]).dt.date
    out["volume"] = out["volume"].astype("int64")
    out["adj_close"] = out["adj_close"].astype("float64")
    records = out.to_dict("records")
    for r in records:
        if pd.isna(r["adj_close"]):
            r["adj_close"] = None
        r["source"] = source
        r["ingested_at"] = now
    return records


def ingest_frame(engine: Engine, df: pd.DataFrame, source: str, label: str | None = None) -> IngestResult:
    """Upsert a validated long frame (ticker, date, open, high, low, close[, adj_close], volume)."""
    if "adj_close" not in df.columns:
        df = df.assign(adj_close=float("nan"))
    records = _records(df, source)

    def work(conn) -> int:
        return upsert(
            conn,
            prices,
            records,
            key=["ticker", "date"],
            update=[*VALUE_COLUMNS, "source", "ingested_at"],
            compare=VALUE_COLUMNS,
        )

    written = run_in_transaction(engine, work)
    return IngestResult(label or source, df["ticker"].nunique(), len(records), written)
