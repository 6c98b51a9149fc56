"""Engines, transactions and the dialect-aware upsert shared by every writer."""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from functools import lru_cache
from typing import TypeVar

from sqlalchemy import (
    ARRAY,
    Engine,
    String,
    Subquery,
    Table,
    create_engine,
    event,
    func,
    literal,
    or_,
    select,
    text,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError, OperationalError

from ldtm_core.config import engine_url, mask_secrets, masked_url
from ldtm_core.errors import LDTMError

T = TypeVar("T")


class DatabaseError(LDTMError):
    """The database could not be reached or refused the operation; the message never holds a password."""


@lru_cache(maxsize=16)
def get_engine(url: str) -> Engine:
    """One pooled engine per URL. pre_ping replaces connections a restarted server has dropped.
    `postgresql://` opens with the installed driver; a URL that cannot be opened raises ConfigError."""
    resolved = engine_url(url)
    if resolved.get_backend_name() == "sqlite":
        engine = create_engine(resolved, connect_args={"timeout": 60})

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_conn, _record):
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.close()

        return engine
    return create_engine(resolved, pool_pre_ping=True, pool_size=5, max_overflow=5)


def is_postgres(engine_or_conn: Engine | Connection) -> bool:
    return engine_or_conn.dialect.name == "postgresql"


def ticker_rows(conn: Engine | Connection, tickers: Sequence[str]) -> Subquery:
    """`tickers` as a one-column row source (column `ticker`), bound as one parameter, never formatted
    into the SQL. Correlated per-ticker subqueries over it (max(id), max(date)) are one index probe
    each, where `ticker IN (...)` with GROUP BY or an aggregate reads every row of every ticker."""
    if is_postgres(conn):
        return (
            func.unnest(literal(list(tickers), ARRAY(String))).table_valued("ticker").render_derived("wanted")
        )
    each = func.json_each(json.dumps(list(tickers))).table_valued("value").alias("wanted_json")
    return select(each.c.value.label("ticker")).subquery("wanted")


def is_transient(exc: BaseException) -> bool:
    """Connection-level failures (server restart, dropped socket) that a retry can cure."""
    if isinstance(exc, DBAPIError) and exc.connection_invalidated:
        return True
    if isinstance(exc, OperationalError):
        text = str(exc).lower()
        return any(
            s in text
            for s in (
                "server closed the connection",
                "connection refused",
                "terminating connection",
                "could not connect",
                "connection not open",
                "the database system is starting up",
                "the database system is shutting down",
                "database is locked",
            )
        )
    return False


def run_in_transaction(
    engine: Engine, work: Callable[[Connection], T], *, attempts: int = 4, base_delay: float = 0.5
) -> T:
    """Run `work` in one transaction; retry the whole transaction on transient faults with backoff.

    The work must be idempotent as a whole (every writer here is: upserts and ON CONFLICT DO NOTHING),
    so a retry after a commit that was lost in flight converges to the same state.
    """
    for attempt in range(1, attempts + 1):
        try:
            with engine.begin() as conn:
                return work(conn)
        except (OperationalError, DBAPIError) as exc:
            if attempt < attempts and is_transient(exc):
                time.sleep(base_delay * 2 ** (attempt - 1))
                continue
            raise DatabaseError(
                f"database {masked_url(engine.url.render_as_string(hide_password=False))} failed: "
                f"{mask_secrets(str(exc.orig if exc.orig is not None else exc), engine.url.render_as_string(hide_password=False))}".splitlines()[
                    0
                ]
            ) from None
    raise AssertionError("unreachable")


@contextmanager
def transaction(engine: Engine) -> Iterator[Connection]:
    with engine.begin() as conn:
        yield conn


def chunked(rows: Sequence[T], size: int) -> Iterable[Sequence[T]]:
    for start in range(0, len(rows), size):
        yield rows[start : start + size]


def upsert(
    conn: Connection,
    table: Table,
    rows: Sequence[dict],
    key: Sequence[str],
    update: Sequence[str] | None,
    *,
    batch: int = 5000,
    compare: Sequence[str] | None = None,
) -> int:
    """INSERT ... ON CONFLICT on both dialects. With `update=None` existing rows are left alone.

    Only rows whose `compare` columns (default: `update`) differ are rewritten, so re-ingesting the same
    file changes nothing — not even bookkeeping columns like ingested_at. Returns rows written.
    """
    if not rows:
        return 0
    insert_fn = postgresql.insert if is_postgres(conn) else sqlite.insert
    # SQLite caps bound parameters per statement; keep batches under it.
    if not is_postgres(conn):
        batch = max(1, min(batch, 30000 // max(1, len(rows[0]))))
    written = 0
    for part in chunked(rows, batch):
        stmt = insert_fn(table).values(list(part))
        if update:
            excluded = stmt.excluded
            conds = [table.c[c].is_distinct_from(excluded[c]) for c in (compare or update)]
            stmt = stmt.on_conflict_do_update(
                index_elements=list(key), set_={c: excluded[c] for c in update}, where=or_(*conds)
            )
        else:
            stmt = stmt.on_conflict_do_nothing(index_elements=list(key))
        result = conn.execute(stmt)
        written += max(result.rowcount or 0, 0)
    return written


def write_lock(conn: Connection, name: str) -> None:
    """Serialise read-then-write transactions that share `name` (e.g. a ticker's hash chain).

    Call first thing in the transaction. PostgreSQL: a transaction-scoped advisory lock on a stable
    64-bit key derived from `name`. SQLite has one writer per file: take the write lock now
    (BEGIN IMMEDIATE) so a later writer waits before it reads, instead of reading stale state.
    """
    if is_postgres(conn):
        key = int.from_bytes(hashlib.blake2b(name.encode(), digest_size=8).digest(), "big", signed=True)
        conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": key})
        return
    dbapi = conn.connection.dbapi_connection
    if not dbapi.in_transaction:
        conn.exec_driver_sql("BEGIN IMMEDIATE")
    else:  # a statement already opened a deferred transaction: a write statement takes the lock
        conn.exec_driver_sql("UPDATE run_log SET id = id WHERE 0 = 1")


def lift_append_only(engine: Engine) -> list[str]:
    """Drop the SQLite triggers that keep `snapshots` append-only (revision 0037) and return their names:
    for a scratch database whose record a benchmark or a test rewrites on purpose. Whoever can open a
    SQLite file can do the same, which is why receipts, not triggers, are the record's witness. On
    PostgreSQL nothing is dropped: the table's owner and superusers are not held by its trigger."""
    if is_postgres(engine):
        return []
    with engine.begin() as conn:
        names = (
            conn.exec_driver_sql(
                "SELECT name FROM sqlite_master WHERE type = 'trigger' AND name LIKE 'ldtm_snapshots_%'"
            )
            .scalars()
            .all()
        )
        for name in names:
            conn.exec_driver_sql(f'DROP TRIGGER "{name}"')
    return list(names)
