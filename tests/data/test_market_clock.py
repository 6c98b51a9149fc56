"""Issue 20 item 9: every default date comes from the XNYS calendar in New York, and "the latest
session" is the latest one whose close has passed — never the server's (UTC) date."""

from __future__ import annotations

import datetime as dt
from zoneinfo import ZoneInfo

import pytest
from accountability_helpers import ingest, make_model, make_settings
from sqlalchemy import func, select
from typer.testing import CliRunner

from ldtm_core.accountability.alerts import operator_alerts
from ldtm_core.accountability.ledger.snapshots import predict
from ldtm_core.cli import app
from ldtm_core.data import calendar
from ldtm_core.data.price_fetch import fetch_prices
from ldtm_core.data.sources.synthetic import SyntheticSource
from ldtm_core.db import get_engine
from ldtm_core.errors import InputError
from ldtm_core.schema import prices

NY = ZoneInfo("America/New_York")
D = dt.date
# 19:53 New York on Tuesday 2026-11-24 is already 00:53 UTC on the 25th.
EVENING_24TH = dt.datetime(2026, 11, 24, 19, 53, tzinfo=NY)
MID_SESSION_24TH = dt.datetime(2026, 11, 24, 10, 0, tzinfo=NY)


def freeze(monkeypatch, at: dt.datetime) -> None:
    monkeypatch.setattr(calendar, "now", lambda: at.astimezone(dt.UTC))


def last_bar(url: str) -> D:
    with get_engine(url).connect() as conn:
        value = conn.execute(select(func.max(prices.c.date))).scalar()
    return value if isinstance(value, D) else D.fromisoformat(str(value)[:10])


@pytest.mark.parametrize(
    "at, expected",
    [
        (EVENING_24TH, D(2026, 11, 24)),  # UTC already says the 25th
        (MID_SESSION_24TH, D(2026, 11, 23)),  # the 24th is still trading
        (dt.datetime(2026, 11, 24, 16, 0, tzinfo=NY), D(2026, 11, 24)),  # at the close
        (
            dt.datetime(2026, 11, 27, 12, 59, tzinfo=NY),
            D(2026, 11, 25),
        ),  # early close 13:00; 26th Thanksgiving
        (dt.datetime(2026, 11, 27, 13, 0, tzinfo=NY), D(2026, 11, 27)),
        (dt.datetime(2026, 11, 28, 12, 0, tzinfo=NY), D(2026, 11, 27)),  # Saturday
    ],
)
def test_latest_closed_session_reads_the_new_york_close(monkeypatch, at, expected):
    freeze(monkeypatch, at)
    assert calendar.latest_closed_session() == expected
    assert calendar.latest_closed_session(at) == expected


@pytest.mark.parametrize(
    "at, expected", [(EVENING_24TH, D(2026, 11, 24)), (MID_SESSION_24TH, D(2026, 11, 23))]
)
def test_ingest_synthetic_defaults_to_the_latest_closed_session(ldtm_env, monkeypatch, at, expected):
    freeze(monkeypatch, at)
    result = CliRunner().invoke(app, ["ingest", "synthetic", "--tickers", "1", "--start", "2026-11-02"])
    assert result.exit_code == 0, result.output
    assert last_bar(ldtm_env["url"]) == expected


def test_fetch_defaults_to_the_latest_closed_session(engine, monkeypatch):
    freeze(monkeypatch, EVENING_24TH)
    report = fetch_prices(engine, SyntheticSource(seed=1), ["AAPL"], first_start=D(2026, 11, 2))
    assert report.end == D(2026, 11, 24)
    assert last_bar(engine.url.render_as_string(hide_password=False)) == D(2026, 11, 24)


def test_live_prediction_refused_for_a_session_not_closed(engine, tmp_path, monkeypatch):
    settings = make_settings(tmp_path, engine.url.render_as_string(hide_password=False))
    ingest(engine, ["AAPL"], start="2026-05-01", end="2026-11-24")  # a bar for the 24th, written early
    make_model(engine, settings, "AAPL")
    freeze(monkeypatch, MID_SESSION_24TH)
    with pytest.raises(InputError, match="2026-11-24: that session has not closed yet"):
        predict(engine, settings)
    freeze(monkeypatch, EVENING_24TH)
    assert predict(engine, settings).mode == "live"


def test_snapshot_deadline_before_an_early_close_waits_for_the_close():
    # Deadline 12:30 on an early-close day (close 13:00): at 12:45 the 27th is not due yet.
    at = dt.datetime(2026, 11, 27, 12, 45, tzinfo=NY)
    assert operator_alerts.due_session(at, dt.time(12, 30)) == D(2026, 11, 25)
    assert operator_alerts.due_session(at.replace(hour=13, minute=5), dt.time(12, 30)) == D(2026, 11, 27)
