"""The snapshot hash chain (SPEC §7): each row's hash covers its prediction and the previous row's hash.

`row_hash` is the one definition used by the writer (snapshots.predict) and the checker (verify).
Only prediction columns are hashed, so fillback can add actuals without breaking the chain.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import pandas as pd
from sqlalchemy import Engine, select

from .schema import snapshots
from .universe import validate_ticker

HASHED_COLUMNS = (
    "ticker",
    "run_date",
    "run_date_close",
    "prev_close",
    "model_id",
    "model_version",
    "mode",
    "next_day_pred",
    "next_monday_pred",
    "one_month_pred",
    "direction_pred",
    "next_day_date",
    "next_monday_date",
    "one_month_date",
)
FLOAT_COLUMNS = {"run_date_close", "prev_close", "next_day_pred", "next_monday_pred", "one_month_pred"}
DATE_COLUMNS = {"run_date", "next_day_date", "next_monday_date", "one_month_date"}


def _canonical(name: str, value) -> str | None:
    if value is None:
        return None
    if name in FLOAT_COLUMNS:
        return repr(float(value))  # shortest round-trip form: exact for the stored double
    if name in DATE_COLUMNS:
        return pd.Timestamp(value).date().isoformat() if not isinstance(value, dt.date) else value.isoformat()
    if name == "model_id":
        return str(int(value))
    return str(value)


def canonical(row: Mapping) -> str:
    return json.dumps([_canonical(c, row[c]) for c in HASHED_COLUMNS], separators=(",", ":"))


def row_hash(prev_hash: str, row: Mapping) -> str:
    return hashlib.sha256(f"{prev_hash}\n{canonical(row)}".encode()).hexdigest()


@dataclass
class AuditProblem:
    ticker: str
    run_date: dt.date
    model_version: str
    what: str


@dataclass
class AuditReport:
    ok: bool
    rows_checked: int
    tickers_checked: int
    problems: list[AuditProblem] = field(default_factory=list)

    @property
    def bad_tickers(self) -> list[str]:
        return sorted({p.ticker for p in self.problems})


def verify(engine: Engine, tickers: Sequence[str] | None = None) -> AuditReport:
    """Recompute every ticker's chain in id order; report each row whose prediction or link is wrong.

    A changed prediction shows as a hash mismatch on that row. A deleted or re-hashed row shows as a
    broken link on the next row. The check continues from the stored hash, so one edit is reported
    once, not on every later row.
    """
    cols = [
        snapshots.c.id,
        *(snapshots.c[c] for c in HASHED_COLUMNS),
        snapshots.c.prev_hash,
        snapshots.c.row_hash,
    ]
    stmt = select(*cols).order_by(snapshots.c.ticker, snapshots.c.id)
    if tickers:
        stmt = stmt.where(snapshots.c.ticker.in_([validate_ticker(t) for t in tickers]))
    problems: list[AuditProblem] = []
    rows = 0
    seen: set[str] = set()
    expected_prev: dict[str, str] = {}
    with engine.connect() as conn:
        for r in conn.execute(stmt).mappings():
            rows += 1
            t = r["ticker"]
            seen.add(t)
            prev = expected_prev.get(t, "")
            if r["prev_hash"] != prev:
                what = (
                    "chain broken: first row of the ticker does not start the chain"
                    if prev == ""
                    else "chain broken: prev_hash does not match the previous row (a row was deleted, inserted or re-hashed)"
                )
                problems.append(AuditProblem(t, r["run_date"], r["model_version"], what))
            if row_hash(r["prev_hash"], r) != r["row_hash"]:
                problems.append(
                    AuditProblem(
                        t, r["run_date"], r["model_version"], "prediction changed: row_hash mismatch"
                    )
                )
            expected_prev[t] = r["row_hash"]
    return AuditReport(ok=not problems, rows_checked=rows, tickers_checked=len(seen), problems=problems)
