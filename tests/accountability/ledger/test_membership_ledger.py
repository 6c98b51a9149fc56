"""Issue 40: predict (nightly and replayed) reads the dated universe, and a ticker that leaves keeps its
record: its pending fills complete from stored prices, and where its prices stop the horizon is marked
unfillable with the reason, never dropped."""

from __future__ import annotations

import datetime as dt
import json

import pytest
from accountability_helpers import ingest, make_model, make_settings
from sqlalchemy import func, select
from typer.testing import CliRunner

from ldtm_core.accountability.ledger.fillback import fillback
from ldtm_core.accountability.ledger.replay import predict_range
from ldtm_core.accountability.ledger.snapshots import predict
from ldtm_core.cli import app
from ldtm_core.data.calendar import sessions_between
from ldtm_core.data.ingest import ingest_frame
from ldtm_core.data.membership import Span, import_membership
from ldtm_core.data.synthetic_market import generate
from ldtm_core.horizons import NAMES
from ldtm_core.schema import run_log, snapshots, unfillable_actuals

D = dt.date
TICKERS = ["AAPL", "NVDA"]
START, END = D(2024, 5, 20), D(2024, 5, 31)  # 9 sessions (Memorial Day 27 May is none)
LEFT = D(2024, 5, 23)


@pytest.fixture
def world(engine, db_url, tmp_path):
    settings = make_settings(tmp_path, db_url)
    ingest(engine, TICKERS)
    for i, t in enumerate(TICKERS):
        make_model(engine, settings, t, seed=i)
    return settings


def _rows(engine):
    with engine.connect() as conn:
        return conn.execute(
            select(snapshots.c.ticker, snapshots.c.run_date).order_by(
                snapshots.c.ticker, snapshots.c.run_date
            )
        ).all()


def test_a_replay_predicts_no_ticker_on_an_evening_it_was_not_a_member(engine, world):
    import_membership(engine, [Span("AAPL", D(2020, 1, 2)), Span("NVDA", D(2020, 1, 2), LEFT)], "h.txt")
    results = predict_range(engine, world, START, END)
    days = sessions_between(START, END)
    rows = _rows(engine)
    assert [r.run_date for r in rows if r.ticker == "AAPL"] == days
    assert [r.run_date for r in rows if r.ticker == "NVDA"] == [d for d in days if d <= LEFT]
    outside = [r for r in results if "NVDA" in r.not_members]
    assert [r.run_date for r in outside] == [d for d in days if d > LEFT]
    assert "NVDA was not a member of the universe on 2024-05-24" in outside[0].not_members["NVDA"]
    assert all(not r.skipped for r in results)  # not a failure: nothing was skipped
    with engine.connect() as conn:
        logged = conn.execute(select(run_log.c.status, run_log.c.summary_json).order_by(run_log.c.id)).all()
    assert {s for s, _ in logged} == {"ok"}
    assert "NVDA" in json.loads(logged[-1].summary_json)["not_members"]


def test_the_nightly_predict_skips_a_non_member_with_a_logged_reason(engine, world, ldtm_env, caplog):
    import_membership(engine, [Span("AAPL", D(2020, 1, 2)), Span("NVDA", D(2020, 1, 2), LEFT)], "h.txt")
    with caplog.at_level("INFO", logger="ldtm.predict"):
        res = predict(engine, world)  # the newest session, 2024-06-28
    assert res.tickers_predicted == ["AAPL"] and list(res.not_members) == ["NVDA"]
    assert "NVDA not predicted" in caplog.text and "2024-05-23" in res.not_members["NVDA"]
    out = CliRunner().invoke(app, ["predict", "--run-date", "2024-06-27"])
    assert out.exit_code == 0, out.output
    assert "not predicted, not a member: NVDA was not a member" in " ".join(out.stdout.split())
    replay = CliRunner().invoke(app, ["predict", "--start", "2024-05-22", "--end", "2024-05-24"])
    assert replay.exit_code == 0, replay.output
    assert "not predicted on 1 evening(s) (2024-05-24..2024-05-24): NVDA" in " ".join(replay.stdout.split())


def test_without_a_history_every_ticker_is_predicted_as_before(engine, world):
    results = predict_range(engine, world, START, END)
    assert all(not r.not_members for r in results)
    assert len(_rows(engine)) == 2 * len(sessions_between(START, END))


def test_a_delisted_tickers_fills_complete_from_stored_prices_and_the_rest_are_marked(
    engine, db_url, tmp_path
):
    """Before issue 40 a ticker whose prices stop left its pending horizons open for ever with no word
    (fillback skipped them silently); now each is marked unfillable with the reason, the row kept."""
    settings = make_settings(tmp_path, db_url)
    ingest(engine, ["AAPL"])
    ingest_frame(
        engine, generate(["NVDA"], "2023-01-03", "2024-06-28", seed=7, delistings={"NVDA": LEFT}), "synthetic"
    )
    for i, t in enumerate(TICKERS):
        make_model(engine, settings, t, seed=i)
    import_membership(engine, [Span("AAPL", D(2020, 1, 2)), Span("NVDA", D(2020, 1, 2), LEFT)], "h.txt")
    predict_range(engine, settings, D(2024, 5, 21), LEFT)
    with engine.connect() as conn:
        nvda = conn.execute(select(func.count()).where(snapshots.c.ticker == "NVDA")).scalar()
    assert nvda == 3  # 21, 22, 23 May
    dry = fillback(engine, dry_run=True)
    assert {(u.ticker, u.run_date, u.horizon) for u in dry.unfillable} >= {("NVDA", LEFT, "next_day")}
    res = fillback(engine)
    with engine.connect() as conn:
        rows = {
            r.run_date: r for r in conn.execute(select(snapshots).where(snapshots.c.ticker == "NVDA")).all()
        }
        marks = conn.execute(select(unfillable_actuals).order_by(unfillable_actuals.c.snapshot_id)).all()
    # Kept and filled where the stored prices reach: 21 and 22 May's next-day targets are <= 23 May.
    assert len(rows) == 3
    assert (
        rows[D(2024, 5, 21)].next_day_actual is not None and rows[D(2024, 5, 22)].next_day_actual is not None
    )
    assert rows[LEFT].next_day_actual is None
    marked = {(m.snapshot_id, m.horizon) for m in marks}
    assert (rows[LEFT].id, "next_day") in marked
    # Every NVDA horizon still open is marked, none of AAPL's (a member, prices go on), none filled.
    open_ = {(r.id, h) for r in rows.values() for h in NAMES if getattr(r, f"{h}_actual") is None}
    assert marked == open_ and {m.ticker for m in marks} == {"NVDA"}
    assert {(u.snapshot_id, u.horizon) for u in res.unfillable} == marked
    reason = marks[0].reason
    assert "NVDA left the universe on 2024-05-23" in reason and "prices stop at 2024-05-23" in reason
    # A rerun adds nothing twice; a close that arrives later still fills the horizon and the mark goes.
    fillback(engine)
    with engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(unfillable_actuals)).scalar() == len(marks)
    late = generate(["NVDA"], "2024-05-20", "2024-06-28", seed=7)
    ingest_frame(engine, late[late["date"] == D(2024, 5, 24)], "synthetic")
    fillback(engine)
    with engine.connect() as conn:
        filled = conn.execute(
            select(snapshots.c.next_day_actual).where(snapshots.c.id == rows[LEFT].id)
        ).scalar()
        left = {(m.snapshot_id, m.horizon) for m in conn.execute(select(unfillable_actuals)).all()}
    assert filled is not None and (rows[LEFT].id, "next_day") not in left


def test_without_a_history_a_ticker_whose_prices_stop_stays_pending_unmarked(engine, db_url, tmp_path):
    settings = make_settings(tmp_path, db_url)
    ingest(engine, ["AAPL"])
    ingest_frame(
        engine, generate(["NVDA"], "2023-01-03", "2024-06-28", seed=7, delistings={"NVDA": LEFT}), "synthetic"
    )
    make_model(engine, settings, "NVDA")
    predict(engine, settings, run_date=LEFT)
    res = fillback(engine)
    assert res.unfillable == []
    with engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(unfillable_actuals)).scalar() == 0
        assert conn.execute(select(func.count()).select_from(snapshots)).scalar() == 1
