"""Reads predict makes for the whole universe every evening must not grow with the stored history
(issue 31): the newest row of each ticker's chain (chain.chain_heads, one probe of
ix_snapshots_ticker_id, 0028) and the latest price date (prices.latest_price_date, one probe of the
prices key per ticker).
"""

from __future__ import annotations

import datetime as dt
import json
import uuid

import pytest
from accountability_helpers import ingest, make_model, make_settings
from sqlalchemy import event, insert, text

from ldtm_core.accountability.ledger.chain import chain_heads
from ldtm_core.data.prices import earliest_price_date, latest_price_date
from ldtm_core.db import is_postgres
from ldtm_core.schema import snapshots

TICKERS = ("AAPL", "MSFT", "QQQ")
START = dt.date(2020, 1, 1)


@pytest.fixture
def models(engine, db_url, tmp_path):
    settings = make_settings(tmp_path, db_url)
    return {t: make_model(engine, settings, t, seed=i) for i, t in enumerate(TICKERS)}


def _add_history(engine, models: dict[str, int], evenings: range) -> None:
    """One row per ticker per evening, interleaved by evening as predict writes them (ids rise across
    tickers). The hashes are placeholders: chain_heads reads them, it does not check them."""
    rows = []
    for k in evenings:
        day = START + dt.timedelta(days=k)
        for t, model_id in models.items():
            rows.append(
                {
                    "ticker": t,
                    "run_date": day,
                    "run_date_close": 100.0,
                    "prev_close": 99.0,
                    "model_id": model_id,
                    "model_version": "v1",
                    "model_status": "active",
                    "mode": "replay",
                    "next_day_pred": 101.0,
                    "next_monday_pred": 101.0,
                    "one_month_pred": 102.0,
                    "direction_pred": "bullish",
                    "next_day_date": day,
                    "next_monday_date": day,
                    "one_month_date": day,
                    "run_id": str(uuid.uuid4()),
                    "created_at": dt.datetime(2020, 1, 1, tzinfo=dt.UTC),
                    "prev_hash": f"{t}-{k - 1}" if k else "",
                    "row_hash": f"{t}-{k}",
                }
            )
    with engine.begin() as conn:
        conn.execute(insert(snapshots), rows)
        if is_postgres(conn):
            conn.execute(text("ANALYZE snapshots"))


def _rows_read(engine, read, table: str = "snapshots") -> tuple:
    """(read(engine)'s answer, the `table` rows its one statement visited).

    PostgreSQL: the actual rows of every plan node over `table` (EXPLAIN ANALYZE, rows removed by a
    filter included). SQLite: the virtual machine steps the statement took (a progress handler called
    every step), which grow with every row a scan visits.
    """
    statements = []

    def capture(conn, cursor, statement, parameters, context, executemany):
        statements.append((statement, parameters))

    event.listen(engine, "before_cursor_execute", capture)
    try:
        answer = read(engine)
    finally:
        event.remove(engine, "before_cursor_execute", capture)
    assert len(statements) == 1
    statement, parameters = statements[0]
    with engine.connect() as conn:
        raw = conn.connection.driver_connection
        if is_postgres(conn):
            with raw.cursor() as cur:
                cur.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + statement, parameters)
                plan = cur.fetchone()[0]
            plan = json.loads(plan) if isinstance(plan, str) else plan
            return answer, _pg_rows(plan[0]["Plan"], table)
        steps = [0]

        def step():
            steps[0] += 1
            return 0

        raw.set_progress_handler(step, 1)
        try:
            raw.execute(statement, parameters).fetchall()
        finally:
            raw.set_progress_handler(None, 1)
        return answer, steps[0]


def _pg_rows(node: dict, table: str) -> int:
    own = 0
    if node.get("Relation Name") == table:
        loops = node.get("Actual Loops", 1)
        own = (node.get("Actual Rows", 0) + node.get("Rows Removed by Filter", 0)) * loops
    return own + sum(_pg_rows(child, table) for child in node.get("Plans", []))


def test_chain_heads_is_the_newest_row_of_each_ticker(engine, models):
    assert chain_heads(engine.connect(), []) == {}
    _add_history(engine, models, range(5))
    with engine.connect() as conn:
        heads = chain_heads(conn, ["QQQ", "AAPL", "AAPL", "NOPE"])
        newest = dict(
            conn.execute(
                text("SELECT ticker, max(id) FROM snapshots WHERE ticker IN ('QQQ', 'AAPL') GROUP BY ticker")
            ).all()
        )
    # A ticker without rows has no head; a repeated one is answered once.
    assert heads == {
        t: (newest[t], f"{t}-4", (START + dt.timedelta(days=4)).isoformat(), "v1") for t in ("AAPL", "QQQ")
    }


def _heads(engine):
    with engine.connect() as conn:
        return chain_heads(conn, list(TICKERS))


def test_chain_heads_reads_do_not_grow_with_the_history(engine, models):
    _add_history(engine, models, range(4))
    short_heads, short = _rows_read(engine, _heads)
    _add_history(engine, models, range(4, 400))  # 100 times the history
    long_heads, long = _rows_read(engine, _heads)
    assert {t: h[1] for t, h in short_heads.items()} == {t: f"{t}-3" for t in TICKERS}
    assert {t: h[1] for t, h in long_heads.items()} == {t: f"{t}-399" for t in TICKERS}
    # One probe per ticker either way; walking the chains would read 100 times as much.
    assert long <= 2 * short, (short, long)


def test_latest_price_date_reads_do_not_grow_with_the_history(engine):
    ingest(engine, list(TICKERS), start="2024-05-01", end="2024-06-28")
    if is_postgres(engine):
        with engine.begin() as conn:
            conn.execute(text("ANALYZE prices"))

    def latest(engine):
        return latest_price_date(engine, [*TICKERS, "NOPE"])

    short_day, short = _rows_read(engine, latest, "prices")
    ingest(engine, list(TICKERS), start="2016-01-04", end="2024-04-30")  # 20 times the bars
    if is_postgres(engine):
        with engine.begin() as conn:
            conn.execute(text("ANALYZE prices"))
    long_day, long = _rows_read(engine, latest, "prices")
    assert short_day == long_day == dt.date(2024, 6, 28)
    assert earliest_price_date(engine, ["AAPL", "NOPE"]) == dt.date(2016, 1, 4)
    assert latest_price_date(engine, ["NOPE"]) is None and earliest_price_date(engine, ["NOPE"]) is None
    assert long <= 2 * short, (short, long)
