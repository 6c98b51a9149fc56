"""Revision 0038: a PostgreSQL store written by the previous release (0037) upgrades with every row as it was;
its trigger now runs with a pinned search_path and qualified names, keeps every rule (a filled answer still
changes only through its logged re-fill), and the upgrade says what it changes. A downgrade puts 0037's
function back."""

from __future__ import annotations

import pytest
from accountability_helpers import refill_next_day, registry_row, snapshot_row
from alembic import command
from migrate_helpers import fresh_database
from sqlalchemy import insert, select, text, update
from typer.testing import CliRunner

from ldtm_core.cli import app
from ldtm_core.db import get_engine
from ldtm_core.migrate import alembic_config, current_revision, head_revision, upgrade
from ldtm_core.schema import snapshots

PREVIOUS = "0037"
PINNED = "search_path=pg_catalog, pg_temp"


def _config(engine) -> list[str] | None:
    with engine.connect() as conn:
        return conn.execute(
            text("SELECT proconfig FROM pg_proc WHERE proname = 'ldtm_snapshots_append_only'")
        ).scalar_one()


@pytest.mark.postgres
def test_a_0037_store_upgrades_with_its_rows_and_a_pinned_trigger(tmp_path, request):
    with fresh_database("postgres", tmp_path, request) as url:
        engine = upgrade(url, PREVIOUS)
        with engine.begin() as conn:
            sid = conn.execute(
                insert(snapshots)
                .values(snapshot_row(registry_row(conn, "AAPL", "active")))
                .returning(snapshots.c.id)
            ).scalar_one()
            conn.execute(update(snapshots).where(snapshots.c.id == sid).values(next_day_actual=102.0))
            before = conn.execute(select(snapshots)).all()
        assert _config(engine) is None

        env = {"LDTM_DATABASE_URL": url, "LDTM_HOME": str(tmp_path)}
        dry = CliRunner().invoke(app, ["db", "upgrade", "--dry-run"], env=env)
        assert dry.exit_code == 0 and "0038" in dry.output and "search_path" in dry.output, dry.output
        assert CliRunner().invoke(app, ["db", "upgrade"], env=env).exit_code == 0
        engine = get_engine(url)
        with engine.connect() as conn:
            assert conn.execute(select(snapshots)).all() == before
        assert _config(engine) == [PINNED]
        # The rules hold as before (the owner is not held by them, so this is the logged path's check).
        with engine.begin() as conn:
            refill_next_day(conn, sid, 102.0, 103.0, -1.0, -1.9)
            assert conn.execute(select(snapshots.c.next_day_actual)).scalar_one() == 103.0

        with engine.begin() as conn:
            cfg = alembic_config(url)
            cfg.attributes["connection"] = conn
            command.downgrade(cfg, PREVIOUS)
        assert _config(engine) is None
        upgrade(url)
        assert _config(engine) == [PINNED] and current_revision(url) == head_revision()
