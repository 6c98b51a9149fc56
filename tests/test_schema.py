"""The migrations build the same schema on SQLite and PostgreSQL, idempotently."""

import datetime as dt

import pytest
from sqlalchemy import inspect, text
from sqlalchemy.exc import IntegrityError

from ldtm_core.db import get_engine
from ldtm_core.migrate import alembic_config, current_revision, upgrade


def head_revision() -> str:
    """The newest revision the shipped migrations define."""
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(alembic_config("sqlite://")).get_current_head()


TABLES = {
    "prices",
    "snapshots",
    "model_registry",
    "registry_events",
    "backtest_folds",
    "run_log",
    "ingested_files",
    "features",
    "feature_sets",
}


def test_upgrade_creates_fixed_tables_and_view(db_url):
    insp = inspect(get_engine(db_url))
    assert set(insp.get_table_names()) >= TABLES
    assert "accuracy_30d" in insp.get_view_names()
    assert insp.get_pk_constraint("prices")["constrained_columns"] == ["ticker", "date"]


def test_upgrade_is_idempotent(db_url):
    before = current_revision(db_url)
    upgrade(db_url)
    upgrade(db_url)
    assert current_revision(db_url) == before == head_revision()


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


def test_0005_downgrades_to_0004_and_upgrades_again(db_url):
    from alembic import command
    from sqlalchemy import insert, select

    from ldtm_core.migrate import alembic_config
    from ldtm_core.schema import backtest_folds

    engine = get_engine(db_url)
    with engine.begin() as conn:
        cfg = alembic_config(db_url)
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, "0004")
    insp = inspect(engine)
    assert "in_sample" not in {c["name"] for c in insp.get_columns("snapshots")}
    assert "config_signature" not in {c["name"] for c in insp.get_columns("backtest_folds")}
    assert set(insp.get_view_names()) >= {"accuracy_30d"}
    assert "accuracy_30d_by_model" not in insp.get_view_names()
    upgrade(db_url)
    insp = inspect(engine)
    assert current_revision(db_url) == head_revision()  # through 0005 and every later revision
    assert {"accuracy_30d", "accuracy_30d_with_in_sample", "accuracy_30d_by_model"} <= set(
        insp.get_view_names()
    )
    d = dt.date(2024, 1, 2)
    row = dict(
        backtest_id="b",
        ticker="AAPL",
        fold=1,
        cutoff=d,
        train_start=d,
        train_end=d,
        test_start=d,
        test_end=d,
        n=1,
        direction_accuracy=1.0,
        always_up_accuracy=1.0,
        mean_abs_pct_error=0.0,
        leakage_rows=0,
        created_at=dt.datetime.now(dt.UTC),
        config_signature="s" * 64,
        data_start=d,
        data_end=d,
    )
    with engine.begin() as conn:
        conn.execute(insert(backtest_folds).values(**row))
        assert conn.execute(select(backtest_folds.c.config_signature)).scalar_one() == "s" * 64
