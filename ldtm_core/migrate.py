"""The application database's Alembic revisions: migrations run from `ldtm db upgrade` alone.

Every other entry point (each `ldtm` command, the Dagster `database` resource, the dashboard) calls
`open_database`: an empty database is created at the newest revision (first use, the demo), one at the
newest opens, and one behind it is refused in one line, unchanged, so the release that wrote it can still
open it. `upgrade`, run by `ldtm db upgrade`, migrates; both refuse a database newer than this code.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from functools import lru_cache
from importlib import resources
from pathlib import Path

from alembic.config import Config
from alembic.runtime.environment import EnvironmentContext
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from filelock import FileLock, Timeout
from sqlalchemy import Connection, Engine, text
from sqlalchemy.exc import OperationalError

from ldtm_core.config import masked_url
from ldtm_core.db import DatabaseError, get_engine
from ldtm_core.errors import ConfigError


def alembic_config(url: str) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(resources.files("ldtm_core").joinpath("migrations")))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


MIGRATION_LOCK_TIMEOUT_S = 300


@lru_cache(maxsize=1)
def _scripts() -> ScriptDirectory:
    """The shipped revisions, read once per process: alembic executes every revision file each time a
    ScriptDirectory is read (about a tenth of the test suite's time went there)."""
    return ScriptDirectory.from_config(alembic_config("sqlite://"))


def _run_upgrade(cfg: Config, revision: str) -> None:
    """alembic's `command.upgrade(cfg, revision)` on the process's one read of the revisions (the command
    would read and execute every revision file again)."""
    script = _scripts()
    with EnvironmentContext(
        cfg, script, fn=lambda rev, _context: script._upgrade_revs(revision, rev), destination_rev=revision
    ):
        script.run_env()


def _at_head(engine: Engine) -> bool:
    """Whether the database is at this code's newest revision: one read, nothing to migrate or refuse.
    False where that cannot be read at once (a SQLite file another process is creating is "locked"): the
    caller then takes the migration lock, as every first use did."""
    try:
        with engine.connect() as conn:
            return MigrationContext.configure(conn).get_current_heads() == (_scripts().get_current_head(),)
    except OperationalError:
        return False


def _sqlite_lock(engine: Engine) -> contextlib.AbstractContextManager:
    """A file lock beside a SQLite database file (nothing to lock for an in-memory database).

    SQLite's own locks do not cover alembic's read-then-create: two first commands on a fresh home both
    see no tables and the second CREATE TABLE fails. The lock makes the second wait and find the head.
    """
    database = engine.url.database
    if not database or database == ":memory:" or database.startswith("file:"):
        return contextlib.nullcontext()
    return FileLock(f"{Path(database).resolve()}.migrate.lock", timeout=MIGRATION_LOCK_TIMEOUT_S)


def _require_sqlite_folder(engine: Engine, url: str) -> None:
    """A SQLite file's folder must exist: a mistyped URL must not create folders (the migration lock
    would) and an empty database, not even for a command that only reads."""
    database = engine.url.database
    if not database or database == ":memory:" or database.startswith("file:"):
        return
    folder = Path(database).expanduser().resolve().parent
    if not folder.is_dir():
        raise ConfigError(
            f"database {masked_url(url)}: the folder {folder} of the SQLite database does not exist; "
            "create it first, or point LDTM_DATABASE_URL at an existing folder (nothing was created)"
        )


def _refuse_a_newer_database(conn, cfg, url: str) -> None:
    """A database a later release migrated carries a revision this code does not know: say so in one
    line instead of alembic's traceback, and change nothing."""
    script = _scripts()
    known = {rev.revision for rev in script.walk_revisions()}
    current = MigrationContext.configure(conn).get_current_heads()
    unknown = [rev for rev in current if rev not in known]
    if unknown:
        raise DatabaseError(
            f"database {masked_url(url)} is at revision {', '.join(unknown)}, newer than this code (its newest: "
            f"{script.get_current_head()}): run the LDTM release that migrated it; nothing was changed"
        )


def _refuse_an_older_database(conn, cfg, url: str) -> None:
    """Only `ldtm db upgrade` migrates: a database behind the newest revision is refused in one line
    (where it is, the newest, how many revisions are pending) and left as it is."""
    current = MigrationContext.configure(conn).get_current_revision()
    script = _scripts()
    head = script.get_current_head()
    if current is not None and current != head:
        behind = len(list(script.iterate_revisions(head, current)))
        raise DatabaseError(
            f"database {masked_url(url)} is at revision {current}; this code's newest is {head}, "
            f"{behind} revision(s) pending: run `ldtm db upgrade` (`--dry-run` lists what changes); "
            "nothing was changed"
        )


def _under_the_migration_lock(url: str, step: Callable[[Connection, Config], None]) -> Engine:
    """Run `step` (with the alembic config bound to the connection) on the database at `url` in one
    transaction, once a database newer than this code is refused, and return its engine. Concurrent
    callers are serialised (an advisory lock on PostgreSQL, a file lock on SQLite); the later ones find
    what the first left."""
    engine = get_engine(url)
    is_sqlite = engine.dialect.name == "sqlite"
    if is_sqlite:
        _require_sqlite_folder(engine, url)
    cfg = alembic_config(url)
    try:
        with _sqlite_lock(engine) if is_sqlite else contextlib.nullcontext(), engine.begin() as conn:
            if conn.dialect.name == "postgresql":
                # Two processes creating one fresh database at once would race on CREATE TABLE.
                conn.execute(text("SELECT pg_advisory_xact_lock(7400123)"))
            cfg.attributes["connection"] = conn
            _refuse_a_newer_database(conn, cfg, url)
            step(conn, cfg)
    except Timeout:
        raise DatabaseError(
            f"database {masked_url(url)}: another process held the migration lock for "
            f"{MIGRATION_LOCK_TIMEOUT_S} s; is an `ldtm db upgrade` stuck?"
        ) from None
    return engine


def open_database(url: str) -> Engine:
    """The engine for the database at `url`, for every entry point but `ldtm db upgrade`. An empty
    database (no revision yet) is created at the newest revision; one at the newest opens as it is; one
    behind or ahead of it is refused in one line (DatabaseError) and nothing is changed."""

    def create_if_empty(conn: Connection, cfg: Config) -> None:
        _refuse_an_older_database(conn, cfg, url)
        _run_upgrade(cfg, "head")  # an empty database: every revision; at the newest: nothing

    return _opened_at_head(url) or _under_the_migration_lock(url, create_if_empty)


def upgrade(
    url: str, revision: str = "head", announce: Callable[[list[tuple[str, str]]], None] | None = None
) -> Engine:
    """Migrate the database at `url` to `revision` (idempotent) and return its engine: `ldtm db upgrade`,
    and the tests' and benchmarks' own stores. `announce` is given the revisions about to be applied,
    read under the migration lock: an upgrade that waited for another is told what is left ([] if none)."""
    at_head = _opened_at_head(url) if revision == "head" else None
    if at_head is not None:
        if announce is not None:
            announce([])
        return at_head

    def step(conn: Connection, cfg: Config) -> None:
        if announce is not None:
            announce(_steps(conn, revision))
        _run_upgrade(cfg, revision)

    return _under_the_migration_lock(url, step)


def _opened_at_head(url: str) -> Engine | None:
    """The engine of a database already at the newest revision (the common case: every command, every
    step), without taking the migration lock or running alembic; None for any other database."""
    engine = get_engine(url)
    if engine.dialect.name == "sqlite":
        _require_sqlite_folder(engine, url)
        database = engine.url.database
        on_disk = database and not database.startswith("file:") and database != ":memory:"
        if on_disk and not Path(database).expanduser().exists():
            return None  # a new file is created under the migration lock only
    return engine if _at_head(engine) else None


def head_revision() -> str | None:
    """The newest revision the shipped migrations define."""
    return _scripts().get_current_head()


def current_revision(url: str) -> str | None:
    with get_engine(url).connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def pending(url: str) -> list[tuple[str, str]]:
    """(revision, what it changes: its docstring's first paragraph) of each revision `upgrade` would apply
    to the database at `url`, oldest first; [] at the newest. Reads only."""
    cfg = alembic_config(url)
    with get_engine(url).connect() as conn:
        _refuse_a_newer_database(conn, cfg, url)
        return _steps(conn)


def _steps(conn: Connection, revision: str = "head") -> list[tuple[str, str]]:
    """(revision, what it changes) from the database's current revision up to `revision`, oldest first."""
    script = _scripts()
    current = MigrationContext.configure(conn).get_current_revision()
    target = script.get_current_head() if revision == "head" else revision
    steps = list(script.iterate_revisions(target, current))
    out = []
    for rev in reversed(steps):
        doc = (rev.module.__doc__ or "").strip().split("\n\n")[0]
        out.append((rev.revision, " ".join(doc.split())))
    return out
