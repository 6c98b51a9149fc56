"""One `run_log` row per run: written as 'running' at the start, completed with status and timings."""

from __future__ import annotations

import datetime as dt
import json
import uuid
from collections.abc import Sequence

from sqlalchemy import Engine, insert, update

from ldtm_core.db import run_in_transaction
from ldtm_core.schema import run_log


def start(
    engine: Engine,
    kind: str,
    run_date: dt.date | None = None,
    tickers: Sequence[str] | None = None,
    run_id: str | None = None,
) -> str:
    """Insert the 'running' row (its own short transaction, so a crash still leaves a trace)."""
    run_id = run_id or str(uuid.uuid4())
    row = {
        "run_id": run_id,
        "kind": kind,
        "started_at": dt.datetime.now(dt.UTC),
        "status": "running",
        "run_date": run_date,
        "tickers": ",".join(tickers) if tickers is not None else None,
    }
    run_in_transaction(engine, lambda conn: conn.execute(insert(run_log).values(**row)))
    return run_id


def finish(
    engine: Engine,
    run_id: str,
    status: str,
    *,
    n_rows: int | None = None,
    phases: dict | None = None,
    summary: dict | None = None,
    message: str | None = None,
    tickers: Sequence[str] | None = None,
    run_date: dt.date | None = None,
) -> None:
    values: dict = {"finished_at": dt.datetime.now(dt.UTC), "status": status, "message": message}
    if n_rows is not None:
        values["n_rows"] = n_rows
    if phases is not None:
        values["phases_json"] = json.dumps(phases, sort_keys=True)
    if summary is not None:
        values["summary_json"] = json.dumps(summary, sort_keys=True, default=str)
    if tickers is not None:
        values["tickers"] = ",".join(tickers)
    if run_date is not None:
        values["run_date"] = run_date
    run_in_transaction(
        engine, lambda conn: conn.execute(update(run_log).where(run_log.c.run_id == run_id).values(**values))
    )


MESSAGE_LIMIT = 2000


def failure_message(exc: BaseException) -> str:
    """What the run_log row of a run that raised says: never empty (KeyboardInterrupt has no text)."""
    if isinstance(exc, KeyboardInterrupt):
        return (
            "interrupted (KeyboardInterrupt, e.g. Ctrl-C) before the run finished: its rows are written "
            "all or none; run it again"
        )
    text = str(exc).strip()
    return (f"{type(exc).__name__}: {text}" if text else type(exc).__name__)[:MESSAGE_LIMIT]


def skipped_message(skipped: dict[str, str], asked: int) -> str:
    """One line naming each skipped ticker and why, for a 'partial' (or all-skipped 'failed') run."""
    reasons = "; ".join(f"{t}: {why}" for t, why in sorted(skipped.items()))
    text = f"skipped {len(skipped)} of {asked} tickers: {reasons}"
    return text if len(text) <= MESSAGE_LIMIT else text[: MESSAGE_LIMIT - 1] + "…"
