"""The snapshot hash chain (SPEC §7): the row hash, the chained insert and the anchors of the chain heads.

Each row's hash covers its prediction and the previous row's hash (per ticker). Chain version 2 (rows
store theirs in `chain_version`) also covers when, in which run and by a model of which status the row
was written (`created_at`, `run_id`, `model_status`), so a prediction cannot be back-dated or
relabelled; version 3 also covers each board baseline's call made with it (`baseline_calls`), so the
board's baselines are what was said that evening. Rows written under an older version keep their
hashes and verify under it. With `LDTM_AUDIT_KEY`
set the hash is an HMAC-SHA256 under that key, so nobody without the key can recompute a chain after
editing it. After every write the head of each ticker's chain (newest id and its hash) is stored in
the predict run's `run_log` row in the same transaction: these anchors live outside the snapshots
table, so deleting or truncating the newest rows leaves an anchor pointing at a missing row.
`audit.verify` is the checker; `row_hash` is the one definition both sides use.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import pandas as pd
from sqlalchemy import Connection, Engine, func, select, tuple_, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import IntegrityError

from ldtm_core.config import env_text
from ldtm_core.db import is_postgres, run_in_transaction, ticker_rows, write_lock
from ldtm_core.faults import pause_point
from ldtm_core.schema import run_log, snapshots
from ldtm_core.scoring.baselines import decode_calls, encode_calls

CHAIN_LOCK = "ldtm:snapshots:chain"
AUDIT_KEY_ENV = "LDTM_AUDIT_KEY"

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
# Chain version 2 also hashes these (and its own number): when, in which run, by a model of which status.
CHAIN_VERSION = 3
HASHED_V2 = ("created_at", "run_id", "model_status")
# Chain version 3 also hashes each board baseline's call, recorded with the prediction (revision 0032).
HASHED_V3 = ("baseline_calls",)
# Hashed too, but only when true: rows written before the flag existed (all false) keep their hashes,
# and flipping it either way still changes the hash.
IN_SAMPLE = "in_sample"
FLOAT_COLUMNS = {"run_date_close", "prev_close", "next_day_pred", "next_monday_pred", "one_month_pred"}
DATE_COLUMNS = {"run_date", "next_day_date", "next_monday_date", "one_month_date"}


def audit_key() -> bytes | None:
    """The HMAC key from the environment (never from a file or the database), or None."""
    raw = env_text(AUDIT_KEY_ENV)
    return raw.encode() if raw else None


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


def _timestamp(value) -> str:
    """A UTC instant to the microsecond, the same whether read back naive (SQLite) or aware (PostgreSQL)."""
    ts = pd.Timestamp(value)
    ts = ts.tz_localize("UTC") if ts.tzinfo is None else ts.tz_convert("UTC")
    return ts.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def chain_version(row: Mapping) -> int:
    return int(row.get("chain_version") or 1)


def canonical(row: Mapping) -> str:
    values = [_canonical(c, row[c]) for c in HASHED_COLUMNS]
    if row.get(IN_SAMPLE):
        values.append("in_sample")
    if chain_version(row) >= 2:
        values += ["v2", _timestamp(row["created_at"]), str(row["run_id"]), str(row["model_status"])]
    if chain_version(row) >= 3:
        calls = row.get("baseline_calls")
        # Re-encoded: the same calls hash the same whatever spacing the stored text has.
        values += ["v3", None if calls is None else encode_calls(decode_calls(calls))]
    return json.dumps(values, separators=(",", ":"))


def row_hash(prev_hash: str, row: Mapping, key: bytes | None = None) -> str:
    """SHA-256 of (previous hash, canonical prediction); HMAC-SHA256 under `key` when one is given."""
    message = f"{prev_hash}\n{canonical(row)}".encode()
    if key:
        return hmac.new(key, message, hashlib.sha256).hexdigest()
    return hashlib.sha256(message).hexdigest()


# --- writing --------------------------------------------------------------------------------------


class ChainConflict(Exception):
    """Another writer extended a ticker's chain between our read and our insert: redo the transaction."""


def chain_heads(conn: Connection, tickers: Sequence[str]) -> dict[str, tuple[int, str, str, str]]:
    """{ticker: (id, row_hash, run_date, model_version)} of the newest row of each ticker's chain.

    One probe of ix_snapshots_ticker_id per ticker (max id for an equal ticker is the index's last
    entry), so the read costs O(tickers) rows however long the chains are; grouping the tickers' rows
    read every row of every chain, and predict and the audit anchor call this every evening.
    """
    if not tickers:
        return {}
    s = snapshots.c
    wanted = ticker_rows(conn, sorted(set(tickers)))
    newest = select(func.max(s.id)).where(s.ticker == wanted.c.ticker).correlate(wanted).scalar_subquery()
    head_ids = select(newest.label("id")).select_from(wanted).subquery()
    rows = conn.execute(
        select(s.ticker, s.id, s.row_hash, s.run_date, s.model_version).join_from(
            head_ids, snapshots, s.id == head_ids.c.id
        )
    ).all()
    return {t: (int(i), h, pd.Timestamp(d).date().isoformat(), v) for t, i, h, d, v in rows}


def _anchor(conn: Connection, run_id: str, tickers: Sequence[str], keyed: bool) -> dict:
    """Store the chain heads of `tickers` in the run's run_log row (same transaction as the rows)."""
    heads = chain_heads(conn, sorted(set(tickers)))
    anchor = {"keyed": keyed, "heads": {t: list(head) for t, head in sorted(heads.items())}}
    conn.execute(
        update(run_log).where(run_log.c.run_id == run_id).values(chain_heads_json=json.dumps(anchor))
    )
    return anchor


def _write(conn: Connection, rows: list[dict], key: bytes | None) -> tuple[int, int, dict]:
    """Insert rows (chained) in the caller's transaction; returns (written, already existing, anchor)."""
    write_lock(conn, CHAIN_LOCK)
    if not rows:
        return 0, 0, {}
    run_id = rows[0]["run_id"]
    # A predict writes one evening; a submission may hold several (each row keyed by its own run date).
    dates = sorted({r["run_date"] for r in rows})
    keys = [(r["ticker"], r["model_version"]) for r in rows]
    existing = {
        (t, d, v)
        for t, d, v in conn.execute(
            select(snapshots.c.ticker, snapshots.c.run_date, snapshots.c.model_version).where(
                snapshots.c.run_date.in_(dates),
                tuple_(snapshots.c.ticker, snapshots.c.model_version).in_(keys),
            )
        )
    }
    todo = [r for r in rows if (r["ticker"], r["run_date"], r["model_version"]) not in existing]
    all_tickers = [r["ticker"] for r in rows]
    if not todo:
        return 0, len(existing), _anchor(conn, run_id, all_tickers, key is not None)
    tickers = sorted({r["ticker"] for r in todo})
    heads = {t: head[1] for t, head in chain_heads(conn, tickers).items()}
    for r in todo:
        r["chain_version"] = CHAIN_VERSION
        r["prev_hash"] = heads.get(r["ticker"], "")
        r["row_hash"] = row_hash(r["prev_hash"], r, key)
        # Two rows of one ticker in one run (champion, then shadow): the second links to the first.
        heads[r["ticker"]] = r["row_hash"]
    insert_fn = postgresql.insert if is_postgres(conn) else sqlite.insert
    # Conflict target = the natural key only: a chain (ticker, prev_hash) conflict must raise, not vanish.
    stmt = insert_fn(snapshots).on_conflict_do_nothing(index_elements=["ticker", "run_date", "model_version"])
    try:
        with conn.begin_nested():
            conn.execute(stmt, todo)
    except IntegrityError as exc:
        raise ChainConflict(str(exc.orig)) from exc
    pause_point("predict.before_commit")
    # Count what this run really inserted (executemany rowcounts are not reliable across drivers).
    run_ids = sorted({r["run_id"] for r in todo})
    written = conn.execute(
        select(func.count())
        .select_from(snapshots)
        .where(
            snapshots.c.run_date.in_(dates),
            snapshots.c.run_id.in_(run_ids),
            snapshots.c.ticker.in_(tickers),
        )
    ).scalar_one()
    anchor = _anchor(conn, run_id, all_tickers, key is not None)
    return written, len(rows) - written, anchor


def write_rows_anchored(engine: Engine, rows: list[dict], attempts: int = 3) -> tuple[int, int, dict]:
    """Write snapshot rows in one transaction, serialised against other writers; retry a chain conflict.

    Returns (written, already existing, anchor): the anchor is what was stored in the run's run_log row.
    """
    key = audit_key()
    for attempt in range(attempts):
        fresh = [dict(r) for r in rows]
        try:
            return run_in_transaction(engine, lambda conn, fresh=fresh: _write(conn, fresh, key))
        except ChainConflict:
            if attempt == attempts - 1:
                raise
            time.sleep(0.05 * (attempt + 1))
    raise AssertionError("unreachable")


def write_rows(engine: Engine, rows: list[dict], attempts: int = 3) -> tuple[int, int]:
    """`write_rows_anchored` without the anchor: (written, already existing)."""
    written, existing, _ = write_rows_anchored(engine, rows, attempts)
    return written, existing


@dataclass(frozen=True)
class Anchor:
    """A chain head recorded outside the snapshots table: row `id` of the ticker had `row_hash`."""

    source: str  # "run <run_id>" for run_log, or e.g. "dagster snapshots materialization"
    id: int
    row_hash: str
    run_date: dt.date | None
    model_version: str
    keyed: bool = False  # written under LDTM_AUDIT_KEY (run_log anchors record it)


def parse_heads(heads: Mapping, source: str) -> dict[str, Anchor]:
    """Anchors from a {ticker: [id, row_hash, run_date, model_version]} mapping (run_log, Dagster metadata)."""
    return {
        t: Anchor(source, int(h[0]), str(h[1]), dt.date.fromisoformat(str(h[2])), str(h[3]))
        for t, h in heads.items()
    }


def load_anchors(
    conn: Connection, tickers: Sequence[str] | None = None, from_id: int | None = None
) -> tuple[dict, bool, list[str]]:
    """({ticker: [Anchor, ...]}, any anchor keyed, run ids whose anchor is unreadable) from every
    predict run's run_log row (from run_log id `from_id` on: the incremental audit), oldest run first."""
    stmt = (
        select(run_log.c.run_id, run_log.c.chain_heads_json)
        .where(run_log.c.chain_heads_json.is_not(None))
        .order_by(run_log.c.id)
    )
    if from_id is not None:
        stmt = stmt.where(run_log.c.id >= from_id)
    wanted = set(tickers) if tickers else None
    out: dict[str, list[Anchor]] = {}
    keyed = False
    unreadable: list[str] = []
    for run_id, blob in conn.execute(stmt):
        try:
            anchor = json.loads(blob)
            heads = parse_heads(anchor["heads"], f"predict run {run_id}")
        except (ValueError, KeyError, TypeError, AttributeError):
            unreadable.append(run_id)
            continue
        keyed = keyed or bool(anchor.get("keyed"))
        for t, a in heads.items():
            if wanted is None or t in wanted:
                out.setdefault(t, []).append(replace(a, keyed=bool(anchor.get("keyed"))))
    return out, keyed, unreadable
