"""The write of feature rows: PostgreSQL's binary COPY built by numpy (the doubles arrive bit for bit,
no text formatting of half a million floats); an executemany insert on SQLite."""

from __future__ import annotations

import io

import numpy as np
import pandas as pd
from sqlalchemy import Connection, insert

from ldtm_core.db import is_postgres
from ldtm_core.schema import FEATURE_COLUMNS, features

PG_COPY_HEADER = b"PGCOPY\n\xff\r\n\x00" + bytes(8)  # signature, flags, no header extension
PG_COPY_TRAILER = b"\xff\xff"
PG_EPOCH = np.datetime64("2000-01-01", "D")
COPY_SQL = f"COPY features (ticker, date, {', '.join(FEATURE_COLUMNS)}) FROM STDIN WITH (FORMAT binary)"


def pg_binary_rows(ticker: str, frame: pd.DataFrame) -> bytes:
    """One ticker's rows in PostgreSQL's binary COPY format, built by numpy in one pass: no text
    formatting of half a million floats, and the doubles arrive bit for bit."""
    name = ticker.encode()
    layout = [
        ("fields", ">i2"),
        ("ticker_len", ">i4"),
        ("ticker", f"S{len(name)}"),
        ("date_len", ">i4"),
        ("date", ">i4"),
    ]
    for i in range(len(FEATURE_COLUMNS)):
        layout += [(f"len{i}", ">i4"), (f"value{i}", ">f8")]
    rec = np.empty(len(frame), dtype=np.dtype(layout))
    rec["fields"] = 2 + len(FEATURE_COLUMNS)
    rec["ticker_len"], rec["ticker"] = len(name), name
    rec["date_len"] = 4
    rec["date"] = (np.asarray(frame.index, dtype="datetime64[D]") - PG_EPOCH).astype(np.int64)
    values = frame.to_numpy(dtype=np.float64)
    for i in range(len(FEATURE_COLUMNS)):
        rec[f"len{i}"], rec[f"value{i}"] = 8, values[:, i]
    return rec.tobytes()


def insert_rows(conn: Connection, parts: list[tuple[str, pd.DataFrame]]) -> None:
    parts = [(t, f) for t, f in parts if len(f)]
    if not parts:
        return
    if is_postgres(conn):
        body = b"".join(pg_binary_rows(t, f) for t, f in parts)
        with conn.connection.driver_connection.cursor() as cur:
            cur.copy_expert(COPY_SQL, io.BytesIO(PG_COPY_HEADER + body + PG_COPY_TRAILER))
        return
    rows = []
    for ticker, frame in parts:
        values = frame.to_numpy(dtype=np.float64).tolist()
        rows += [
            {"ticker": ticker, "date": d, **dict(zip(FEATURE_COLUMNS, v, strict=True))}
            for d, v in zip(frame.index, values, strict=True)
        ]
    conn.execute(insert(features), rows)
