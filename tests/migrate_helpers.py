"""Stores at a chosen Alembic revision, on SQLite and on a fresh PostgreSQL database (issue 38: migrations
run only from `ldtm db upgrade`)."""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator

from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from ldtm_core.db import get_engine
from ldtm_core.migrate import alembic_config

# An older release's store: the revision of `test_db_upgrade_says_what_it_changes_and_dry_run_changes_nothing`.
OLDER = "0026"


def pending_after(revision: str) -> int:
    """How many revisions `ldtm db upgrade` applies to a store at `revision`."""
    from alembic.script import ScriptDirectory

    script = ScriptDirectory.from_config(alembic_config("sqlite://"))
    return len(list(script.iterate_revisions(script.get_current_head(), revision)))


@contextlib.contextmanager
def fresh_database(backend: str, tmp_path, request) -> Iterator[str]:
    """The URL of a database with nothing in it: a SQLite file not created yet, or a new PostgreSQL
    database on the test server (dropped afterwards)."""
    if backend == "sqlite":
        yield f"sqlite:///{tmp_path / 'ldtm.db'}"
        return
    server = request.getfixturevalue("pg_server_url")
    admin = create_engine(make_url(server).set(database="postgres"), isolation_level="AUTOCOMMIT")
    name = f"ldtm_test_open_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    url = make_url(server).set(database=name).render_as_string(hide_password=False)
    try:
        yield url
    finally:
        get_engine(url).dispose()
        get_engine.cache_clear()
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def revision_of(url: str) -> str | None:
    """The stored revision, read directly (no LDTM code path that could migrate)."""
    from alembic.runtime.migration import MigrationContext

    with get_engine(url).connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def upgrade_by_cli(url: str, home, revision: str, said: str):
    """`ldtm db upgrade --dry-run` as an operator runs it (it names `revision` and says `said` of what it
    changes), then `ldtm db upgrade`: the store at the newest revision; its engine."""
    from typer.testing import CliRunner

    from ldtm_core.cli import app
    from ldtm_core.migrate import current_revision, head_revision

    env = {"LDTM_DATABASE_URL": url, "LDTM_HOME": str(home)}
    dry = CliRunner().invoke(app, ["db", "upgrade", "--dry-run"], env=env)
    assert dry.exit_code == 0 and revision in dry.output and said in dry.output, dry.output
    out = CliRunner().invoke(app, ["db", "upgrade"], env=env)
    assert out.exit_code == 0, out.output
    assert current_revision(url) == head_revision()
    return get_engine(url)
