"""A process's hold on one of a pool's N slots, taken atomically through the app database.

Dagster's op-concurrency pool admits a step in two steps that other processes can interleave (it
checks for a free slot, then marks one taken), so two runs claiming at the same moment can run one
step more than the limit: measured on SQLite instance storage, 4 processes claiming a pool of 2 at
once held 3 slots in 2 of 5 trials. A GPU step therefore also takes a lease here before it trains;
an over-admitted step waits for a lease instead of running beside the others.

PostgreSQL: a session advisory lock (pool key, slot) on a connection of its own, so a process that
dies, however it dies, frees its slot with its connection. SQLite (one host by nature): an exclusive
`flock` on one file per slot beside the database file, which the kernel frees with the process.
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from filelock import FileLock, Timeout
from sqlalchemy import create_engine, text
from sqlalchemy.pool import NullPool

from ldtm_core.config import engine_url

POLL_S = 0.5


def pool_key(pool: str) -> int:
    """The pool's name as the first (signed 32-bit) half of its advisory lock keys."""
    return zlib.crc32(pool.encode()) - 2**31


@contextmanager
def slot_lease(
    database_url: str,
    pool: str,
    slots: int,
    *,
    on_wait: Callable[[], None] | None = None,
    poll_s: float = POLL_S,
) -> Iterator[int | None]:
    """Hold one of `pool`'s `slots` slots while the block runs; yields its index (None where nothing
    can be shared: an in-memory SQLite database). Waits, polling every `poll_s`, while all are held,
    calling `on_wait` once when it starts waiting."""
    url = engine_url(database_url)
    if url.get_backend_name() == "sqlite":
        database = url.database
        if not database or database == ":memory:" or database.startswith("file:"):
            yield None
            return
        lease = _file_lease(Path(database).resolve(), pool, slots, on_wait, poll_s)
    else:
        lease = _advisory_lease(url, pool, slots, on_wait, poll_s)
    with lease as slot:
        yield slot


@contextmanager
def _advisory_lease(url, pool: str, slots: int, on_wait, poll_s: float) -> Iterator[int]:
    engine = create_engine(url, poolclass=NullPool)  # its connection closes (and unlocks) with the block
    key = pool_key(pool)
    try:
        with engine.connect() as conn:
            conn = conn.execution_options(isolation_level="AUTOCOMMIT")  # noqa: PLW2901 - no open transaction
            take = text("SELECT pg_try_advisory_lock(:key, :slot)")
            slot = _first_free(
                lambda i: bool(conn.execute(take, {"key": key, "slot": i}).scalar()), slots, on_wait, poll_s
            )
            try:
                yield slot
            finally:
                conn.execute(text("SELECT pg_advisory_unlock(:key, :slot)"), {"key": key, "slot": slot})
    finally:
        engine.dispose()


@contextmanager
def _file_lease(database: Path, pool: str, slots: int, on_wait, poll_s: float) -> Iterator[int]:
    folder = database.with_name(f"{database.name}.slots")
    folder.mkdir(exist_ok=True)
    locks = [FileLock(folder / f"{pool_key(pool) + 2**31:08x}-{i}.lock", timeout=0) for i in range(slots)]

    def take(i: int) -> bool:
        try:
            locks[i].acquire()
        except Timeout:
            return False
        return True

    slot = _first_free(take, slots, on_wait, poll_s)
    try:
        yield slot
    finally:
        locks[slot].release()


def _first_free(take: Callable[[int], bool], slots: int, on_wait, poll_s: float) -> int:
    waited = False
    while True:
        for i in range(max(1, slots)):
            if take(i):
                return i
        if not waited and on_wait is not None:
            on_wait()
        waited = True
        time.sleep(poll_s)
