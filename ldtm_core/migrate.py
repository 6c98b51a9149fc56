"""The application database's Alembic revisions: migrations run from `ldtm db upgrade` alone.

Every other entry point (each `ldtm` command, the Dagster `database` resource, the dashboard) calls
`open_database`: an empty database is created at the newest revision (first use, the demo), one at the
newest opens, and one behind it is refused in one line, unchanged, so the release that wrote it can still
open it. `upgrade`, run by `ldtm db upgrade`, migrates; both refuse a database newer than this code.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from importlib import resources
from pathlib import Path

from alembic import command
from alembic.config import Config
from filelock import FileLock, Timeout
from sqlalchemy import Connection, Engine, text

from ldtm_core.config import masked_url
from ldtm_core.db import DatabaseError, get_engine
from ldtm_core.errors import ConfigError


def alembic_config(url: str) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(resources.files("ldtm_core").joinpath("migrations")))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


MIGRATION_LOCK_TIMEOUT_S = 300


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
    from alembic.runtime.migration import MigrationContext
    from alembic.script import ScriptDirectory

    script = ScriptDirectory.from_config(cfg)
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
    from alembic.runtime.migration import MigrationContext
    from alembic.script import ScriptDirectory

    current = MigrationContext.configure(conn).get_current_revision()
    script = ScriptDirectory.from_config(cfg)
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
        command.upgrade(cfg, "head")  # an empty database: every revision; at the newest: nothing

    return _under_the_migration_lock(url, create_if_empty)


def upgrade(url: str, revision: str = "head") -> Engine:
    """Migrate the database at `url` to `revision` (idempotent) and return its engine: `ldtm db upgrade`,
    and the tests' and benchmarks' own stores."""
    return _under_the_migration_lock(url, lambda conn, cfg: command.upgrade(cfg, revision))


def head_revision() -> str | None:
    """The newest revision the shipped migrations define."""
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(alembic_config("sqlite://")).get_current_head()


def current_revision(url: str) -> str | None:
    from alembic.runtime.migration import MigrationContext

    with get_engine(url).connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def pending(url: str) -> list[tuple[str, str]]:
    """(revision, what it changes: its docstring's first paragraph) of each revision `upgrade` would apply
    to the database at `url`, oldest first; [] at the newest. Reads only."""
    from alembic.runtime.migration import MigrationContext
    from alembic.script import ScriptDirectory

    cfg = alembic_config(url)
    script = ScriptDirectory.from_config(cfg)
    with get_engine(url).connect() as conn:
        _refuse_a_newer_database(conn, cfg, url)
        current = MigrationContext.configure(conn).get_current_revision()
    steps = list(script.iterate_revisions(script.get_current_head(), current))
    out = []
    for rev in reversed(steps):
        doc = (rev.module.__doc__ or "").strip().split("\n\n")[0]
        out.append((rev.revision, " ".join(doc.split())))
    return out
