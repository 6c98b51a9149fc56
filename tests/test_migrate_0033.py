"""Revision 0033 (issue 40): a store written by the previous release (0032) upgrades, keeps every row, and
gains two empty tables, universe_membership and unfillable_actuals; with them empty nothing reads
differently (every ticker of the configured universe is a member on every evening)."""

from __future__ import annotations

import datetime as dt

import pytest
from migrate_helpers import fresh_database, upgrade_by_cli
from sqlalchemy import MetaData, Table, func, inspect, select, text

from ldtm_core.db import get_engine
from ldtm_core.migrate import upgrade

PREVIOUS = "0032"


@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_a_previous_release_store_upgrades_to_0033_and_keeps_its_rows(tmp_path, backend, request):
    from ldtm_core.data.membership import load_membership, members_as_of

    with fresh_database(backend, tmp_path, request) as url:
        engine = upgrade(url, PREVIOUS)
        prices = Table("prices", MetaData(), autoload_with=engine)
        rows = [
            {
                "ticker": t,
                "date": dt.date(2024, 1, 2) + dt.timedelta(days=i),
                "open": 10.0,
                "high": 11.0,
                "low": 9.0,
                "close": 10.5,
                "adj_close": 10.5,
                "volume": 1000,
                "source": "test",
                "ingested_at": dt.datetime(2024, 1, 5, tzinfo=dt.UTC),
            }
            for t in ("AAPL", "NVDA")
            for i in range(3)
        ]
        with engine.begin() as conn:
            conn.execute(prices.insert(), rows)
        engine = upgrade_by_cli(url, tmp_path, "0033", "universe_membership")
        names = set(inspect(engine).get_table_names())
        assert {"universe_membership", "unfillable_actuals"} <= names
        with engine.connect() as conn:
            assert conn.execute(select(func.count()).select_from(prices)).scalar() == len(rows)
            for table in ("universe_membership", "unfillable_actuals"):
                assert conn.execute(text(f"SELECT count(*) FROM {table}")).scalar() == 0  # noqa: S608
        assert not load_membership(engine).has_history
        assert members_as_of(engine, dt.date(2000, 1, 3), ["AAPL", "NVDA"]) == ["AAPL", "NVDA"]
        # And back: the downgrade drops exactly the two tables.
        from alembic import command

        from ldtm_core.migrate import alembic_config

        with get_engine(url).begin() as conn:
            cfg = alembic_config(url)
            cfg.attributes["connection"] = conn
            command.downgrade(cfg, PREVIOUS)
        assert not {"universe_membership", "unfillable_actuals"} & set(
            inspect(get_engine(url)).get_table_names()
        )
