"""The migrations build the same schema on SQLite and PostgreSQL, idempotently."""

import datetime as dt

import pytest
from sqlalchemy import inspect, text
from sqlalchemy.exc import IntegrityError

from ldtm_core.db import get_engine
from ldtm_core.migrate import current_revision, upgrade

TABLES = {"prices", "snapshots", "model_registry", "registry_events", "backtest_folds", "run_log"}


def test_upgrade_creates_fixed_tables_and_view(db_url):
    insp = inspect(get_engine(db_url))
    assert set(insp.get_table_names()) >= TABLES
    assert "accuracy_30d" in insp.get_view_names()
    assert insp.get_pk_constraint("prices")["constrained_columns"] == ["ticker", "date"]


def test_upgrade_is_idempotent(db_url):
    before = current_revision(db_url)
    upgrade(db_url)
    upgrade(db_url)
    assert current_revision(db_url) == before == "0005"


def test_one_active_model_per_ticker_is_enforced_by_the_database(db_url):
    now = dt.datetime.now(dt.UTC)
    row = dict(
        ticker="AAPL",
        status="active",
        profile="demo",
        arch_signature="x",
        config_json="{}",
        trained_on_date=dt.date(2024, 1, 2),
        checkpoint_path="p",
        checkpoint_sha256="0" * 64,
        created_at=now,
        updated_at=now,
    )
    engine = get_engine(db_url)
    from ldtm_core.schema import model_registry

    with engine.begin() as conn:
        conn.execute(model_registry.insert(), [row, {**row, "status": "retired"}, {**row, "ticker": "NVDA"}])
    with pytest.raises(IntegrityError), engine.begin() as conn:
        conn.execute(model_registry.insert(), [row])
    with engine.connect() as conn:
        assert conn.execute(text("SELECT COUNT(*) FROM model_registry WHERE status = 'active'")).scalar() == 2
