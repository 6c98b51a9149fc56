"""Revision 0037 on SQLite: the same append-only rules as PostgreSQL's trigger, as triggers that hold
every writer (SQLite has no roles). PostgreSQL's, as the application role: tests/test_db_roles.py."""

from __future__ import annotations

import pytest
from accountability_helpers import refill_next_day, registry_row, snapshot_row
from sqlalchemy import delete, insert, select, text, update
from sqlalchemy.exc import IntegrityError

from ldtm_core.db import get_engine, lift_append_only
from ldtm_core.horizons import HORIZONS
from ldtm_core.migrate import upgrade
from ldtm_core.schema import snapshots

REFUSED = "snapshots are append-only"


@pytest.fixture
def filled(sqlite_url):
    """One published row whose next-day answer is filled."""
    upgrade(sqlite_url)
    engine = get_engine(sqlite_url)
    with engine.begin() as conn:
        row = snapshot_row(registry_row(conn, "AAPL", "active"))
        sid = conn.execute(insert(snapshots).values(row).returning(snapshots.c.id)).scalar_one()
        conn.execute(
            update(snapshots)
            .where(snapshots.c.id == sid)
            .values(next_day_actual=102.0, next_day_pct_error=-1.0)
        )
    return engine, sid


@pytest.mark.parametrize(
    "change",
    [
        lambda sid: delete(snapshots).where(snapshots.c.id == sid),
        lambda sid: update(snapshots).where(snapshots.c.id == sid).values(next_day_pred=150.0),
        lambda sid: update(snapshots).where(snapshots.c.id == sid).values(row_hash="forged"),
        lambda sid: update(snapshots).where(snapshots.c.id == sid).values(next_day_actual=103.0),
        lambda sid: update(snapshots).where(snapshots.c.id == sid).values(next_day_pct_error=0.0),
        lambda sid: update(snapshots).where(snapshots.c.id == sid).values(next_day_direction_correct=True),
    ],
    ids=["delete", "prediction", "hash", "filled actual", "filled error", "filled direction"],
)
def test_sqlite_refuses_what_the_record_never_allows(filled, change):
    engine, sid = filled
    with pytest.raises(IntegrityError, match=REFUSED), engine.begin() as conn:
        conn.execute(change(sid))
    with engine.connect() as conn:
        assert conn.execute(select(snapshots.c.next_day_pred, snapshots.c.next_day_actual)).one() == (
            101.0,
            102.0,
        )


def test_sqlite_allows_a_first_fill_and_the_logged_refill(filled):
    engine, sid = filled
    with engine.begin() as conn:
        conn.execute(update(snapshots).where(snapshots.c.id == sid).values(one_month_actual=99.0))
        refill_next_day(conn, sid, 102.0, 103.0, -1.0, -1.9)
    with engine.connect() as conn:
        assert conn.execute(select(snapshots.c.next_day_actual, snapshots.c.one_month_actual)).one() == (
            103.0,
            99.0,
        )


def test_whoever_opens_the_file_can_lift_them(filled):
    engine, sid = filled
    lifted = lift_append_only(engine)
    assert len(lifted) == 2 + 2 * len(HORIZONS)
    with engine.begin() as conn:
        assert conn.execute(delete(snapshots).where(snapshots.c.id == sid)).rowcount == 1
    assert lift_append_only(engine) == []


def test_a_downgrade_removes_them(sqlite_url):
    from alembic import command

    from ldtm_core.migrate import alembic_config

    def triggers() -> int:
        with get_engine(sqlite_url).connect() as conn:
            return conn.execute(
                text("SELECT count(*) FROM sqlite_master WHERE type = 'trigger'")
            ).scalar_one()

    assert triggers() == 2 + 2 * len(HORIZONS)
    with get_engine(sqlite_url).begin() as conn:
        cfg = alembic_config(sqlite_url)
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, "0036")
    assert triggers() == 0


def test_a_temporary_fill_revisions_cannot_stand_in_for_the_log(filled):
    """SQLite's triggers read only tables of their own database: a session's temporary `fill_revisions`
    holding a made-up log row does not let a filled answer change (PostgreSQL: tests/test_db_roles.py)."""
    engine, sid = filled
    with pytest.raises(IntegrityError, match=REFUSED), engine.begin() as conn:
        conn.execute(text("CREATE TEMP TABLE fill_revisions (snapshot_id, horizon, old_actual, new_actual)"))
        conn.execute(
            text("INSERT INTO temp.fill_revisions VALUES (:sid, 'next_day', 102.0, 103.0)"), {"sid": sid}
        )
        conn.execute(update(snapshots).where(snapshots.c.id == sid).values(next_day_actual=103.0))
