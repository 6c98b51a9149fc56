"""The last verified anchor of the snapshot chain: where the nightly (incremental) audit starts.

A whole-store audit that passed records, in its own `run_log` row (kind 'audit', summary_json), every
ticker's chain head as it verified it (id, hash, keyed, chain version), the largest snapshot id it read,
the first run_log id whose anchors it may not have seen yet, and when the last full audit passed. Each
head hash covers every row before it (each row hashes its predecessor's hash): a rewrite of any earlier
row that keeps the chain consistent changes the head, so the next audit only re-checks that head and
recomputes what came after it. What it cannot see (an old row edited without recomputing its hash, an
old price edited) the full audit finds: on demand and at least weekly (`auto`).
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping
from dataclasses import dataclass

import pandas as pd
from sqlalchemy import Connection, Engine, func, select

from ldtm_core.accountability.ledger import runlog
from ldtm_core.schema import run_log, snapshots

KIND = "audit"
# A predict run still 'running' this long after its start crashed: it will never write its anchor.
IN_FLIGHT = dt.timedelta(days=2)


@dataclass(frozen=True)
class Head:
    id: int
    row_hash: str
    keyed: bool
    version: int


@dataclass(frozen=True)
class Verified:
    run_id: str
    verified_at: dt.datetime  # when that audit started (it saw every row committed before)
    last_full_at: dt.datetime  # when the newest passing full audit started
    max_id: int  # every snapshot row with id <= max_id was verified then
    run_log_from: int  # run_log rows from this id on may carry anchors that audit did not read
    heads: dict[str, Head]


def _utc(value) -> dt.datetime:
    ts = pd.Timestamp(value)
    return (ts.tz_localize("UTC") if ts.tzinfo is None else ts.tz_convert("UTC")).to_pydatetime()


def latest(conn: Connection) -> Verified | None:
    """The newest passing whole-store audit's anchor, or None (never verified, or unreadable)."""
    row = conn.execute(
        select(run_log.c.run_id, run_log.c.summary_json)
        .where(run_log.c.kind == KIND, run_log.c.status == "ok", run_log.c.summary_json.is_not(None))
        .order_by(run_log.c.id.desc())
        .limit(1)
    ).first()
    if row is None:
        return None
    try:
        blob = json.loads(row.summary_json)
        return Verified(
            run_id=row.run_id,
            verified_at=_utc(blob["verified_at"]),
            last_full_at=_utc(blob["last_full_at"]),
            max_id=int(blob["max_id"]),
            run_log_from=int(blob["run_log_from"]),
            heads={t: Head(int(h[0]), str(h[1]), bool(h[2]), int(h[3])) for t, h in blob["heads"].items()},
        )
    except (ValueError, KeyError, TypeError, IndexError):
        return None  # an unreadable anchor costs a full audit, never a skipped row


def read_bounds(conn: Connection, now: dt.datetime) -> tuple[int, int]:
    """(largest snapshot id, first run_log id whose anchor may still come): read before the rows, so a
    predict run committing during the audit is picked up by the next one."""
    max_id = conn.execute(select(func.coalesce(func.max(snapshots.c.id), 0))).scalar_one()
    r = run_log.c
    in_flight = conn.execute(
        select(func.min(r.id)).where(
            r.kind != KIND,
            r.status == "running",
            r.chain_heads_json.is_(None),
            r.started_at > now - IN_FLIGHT,
        )
    ).scalar_one()
    top = conn.execute(select(func.coalesce(func.max(r.id), 0))).scalar_one()
    return int(max_id), int(in_flight if in_flight is not None else top + 1)


def record(
    engine: Engine,
    *,
    full: bool,
    ok: bool,
    started: dt.datetime,
    max_id: int,
    run_log_from: int,
    heads: Mapping[str, Head],
    previous: Verified | None,
    rows_checked: int,
    problems: int,
) -> str:
    """One run_log row for this audit; a failed one records no anchor (the next night re-checks)."""
    run_id = runlog.start(engine, KIND)
    last_full = started if full else (previous.last_full_at if previous else started)
    summary = {
        "mode": "full" if full else "incremental",
        "rows_checked": rows_checked,
        "problems": problems,
    }
    if ok:
        summary |= {
            "verified_at": started.isoformat(),
            "last_full_at": last_full.isoformat(),
            "max_id": max_id,
            "run_log_from": run_log_from,
            "heads": {t: [h.id, h.row_hash, h.keyed, h.version] for t, h in sorted(heads.items())},
        }
    runlog.finish(engine, run_id, "ok" if ok else "failed", n_rows=rows_checked, summary=summary)
    return run_id
