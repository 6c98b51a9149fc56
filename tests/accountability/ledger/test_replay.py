"""`predict --start D1 --end D2`: every session of a range in one process, each checkpoint loaded once."""

from __future__ import annotations

import datetime as dt

import pytest
from accountability_helpers import ingest, make_model, make_settings
from sqlalchemy import func, select
from typer.testing import CliRunner

from ldtm_core.accountability.ledger.replay import predict_range
from ldtm_core.cli import app
from ldtm_core.data.calendar import sessions_between
from ldtm_core.errors import InputError
from ldtm_core.learning import inference
from ldtm_core.schema import run_log, snapshots

TICKERS = ["AAPL", "NVDA"]
START, END = dt.date(2024, 5, 20), dt.date(2024, 5, 31)  # 9 sessions (Memorial Day 27 May is none)


@pytest.fixture
def world(engine, db_url, tmp_path):
    settings = make_settings(tmp_path, db_url)
    ingest(engine, TICKERS)
    for i, t in enumerate(TICKERS):
        make_model(engine, settings, t, seed=i)
    return settings


def _count(engine, table) -> int:
    with engine.connect() as conn:
        return conn.execute(select(func.count()).select_from(table)).scalar()


def test_range_predicts_every_session_with_one_load_per_model(engine, world, monkeypatch):
    inference.clear_model_cache()
    loads = []
    real = inference.load_weights
    monkeypatch.setattr(inference, "load_weights", lambda *a, **k: loads.append(a) or real(*a, **k))
    results = predict_range(engine, world, START, END)
    days = sessions_between(START, END)
    assert len(days) == 9 and dt.date(2024, 5, 27) not in days
    assert [r.run_date for r in results] == days
    assert len(loads) == len(TICKERS)  # not one per session
    with engine.connect() as conn:
        rows = conn.execute(select(snapshots.c.ticker, snapshots.c.run_date, snapshots.c.mode)).all()
    assert sorted((r.ticker, r.run_date) for r in rows) == sorted((t, d) for t in TICKERS for d in days)
    assert {r.mode for r in rows} == {"replay"}
    assert _count(engine, run_log) == len(days)  # one run per evening, as the backfill records them
    again = predict_range(engine, world, START, END)  # rerun = no-op
    assert sum(r.rows_written for r in again) == 0 and _count(engine, snapshots) == len(rows)


def test_a_bad_range_is_refused_before_anything_is_written(engine, world):
    with pytest.raises(InputError, match="is after"):
        predict_range(engine, world, END, START)
    with pytest.raises(InputError, match="no XNYS trading session"):
        predict_range(engine, world, dt.date(2024, 5, 25), dt.date(2024, 5, 27))
    with pytest.raises(InputError, match="newest close"):
        predict_range(engine, world, dt.date(2024, 6, 20), dt.date(2024, 7, 10))
    assert _count(engine, snapshots) == 0 and _count(engine, run_log) == 0


def test_cli_start_end(engine, world, ldtm_env):
    runner = CliRunner()
    # The CLI's settings share the world's database (ldtm_env) but have their own home: new models.
    out = runner.invoke(app, ["predict", "--start", "2024-05-29", "--end", "2024-05-31", "-t", "AAPL"])
    assert out.exit_code == 0, out.output
    assert "replayed 3 sessions 2024-05-29..2024-05-31: 3 rows written" in " ".join(out.output.split())
    assert "replay 3/3: 2024-05-31: 1 rows" in out.output  # progress lines when not on a terminal
    bad = runner.invoke(app, ["predict", "--start", "2024-05-29"])
    assert bad.exit_code == 2 and "--start and --end go together" in bad.stderr
    bad = runner.invoke(
        app, ["predict", "--start", "2024-05-29", "--end", "2024-05-31", "--run-date", "2024-05-31"]
    )
    assert bad.exit_code == 2
