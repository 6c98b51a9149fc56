"""fillback: batched actuals per horizon, independent horizons, dry run, idempotence, chain untouched."""

from __future__ import annotations

import threading

import numpy as np
import pandas as pd
import pytest
from accountability_helpers import ingest, make_model, make_settings
from sqlalchemy import event, select, text

from ldtm_core.accountability.ledger.audit import HASHED_COLUMNS, verify
from ldtm_core.accountability.ledger.fillback import fillback
from ldtm_core.accountability.ledger.snapshots import predict
from ldtm_core.data.corporate_actions import Action, record_actions
from ldtm_core.data.ingest import ingest_frame
from ldtm_core.horizons import NAMES
from ldtm_core.schema import snapshots

TICKERS = ["AAPL", "QQQ"]


def _rows(engine):
    with engine.connect() as conn:
        return pd.DataFrame(conn.execute(select(snapshots).order_by(snapshots.c.id)).mappings().all())


@pytest.fixture
def world(engine, db_url, tmp_path):
    settings = make_settings(tmp_path, db_url)
    df = ingest(engine, TICKERS)
    for i, t in enumerate(TICKERS):
        make_model(engine, settings, t, seed=i)
    return settings, df


def test_fills_every_horizon_from_the_prices(engine, world):
    settings, df = world
    dates = sorted(df["date"].unique())
    for d in dates[-40:-30]:
        predict(engine, settings, run_date=d)
    before = _rows(engine)
    res = fillback(engine, neutral_band_pct=0.25)
    assert res.filled == dict.fromkeys(NAMES, 20)
    after = _rows(engine)
    closes = df.set_index(["ticker", "date"])["close"]
    for r in after.itertuples():
        for h in NAMES:
            actual = closes[(r.ticker, getattr(r, f"{h}_date"))]
            assert getattr(r, f"{h}_actual") == pytest.approx(actual)
            pred = getattr(r, f"{h}_pred")
            assert getattr(r, f"{h}_pct_error") == pytest.approx((pred - actual) / actual * 100)
        move = (r.next_day_actual - r.run_date_close) / r.run_date_close * 100
        want_dir = "bullish" if move > 0.25 else "bearish" if move < -0.25 else "neutral"
        assert r.next_day_direction_actual == want_dir
        assert bool(r.next_day_direction_correct) == (
            np.sign(r.next_day_pred - r.run_date_close) == np.sign(r.next_day_actual - r.run_date_close)
        )
        assert r.filled_at is not None
    # prediction columns untouched, chain intact
    pd.testing.assert_frame_equal(before[list(HASHED_COLUMNS)], after[list(HASHED_COLUMNS)])
    assert verify(engine).ok
    # idempotent
    assert fillback(engine, dry_run=True).pending == []
    again = fillback(engine)
    assert again.total_filled == 0
    pd.testing.assert_frame_equal(after, _rows(engine))


def test_horizons_fill_independently_as_prices_arrive(engine, world):
    settings, df = world
    dates = sorted(df["date"].unique())
    d = dates[-30]
    # Pretend the future has not happened yet: keep prices only up to d + 1 session.
    with engine.begin() as conn:
        conn.execute(text("DELETE FROM prices WHERE date > :d"), {"d": dates[-29]})
    predict(engine, settings, run_date=d)
    row0 = _rows(engine).iloc[0]
    # Each horizon fills (both tickers) once its target date has a price.
    known = {h: 2 if row0[f"{h}_date"] <= dates[-29] else 0 for h in NAMES}
    assert known["next_day"] == 2 and known["one_month"] == 0
    res = fillback(engine)
    assert res.filled == known
    row = _rows(engine).iloc[0]
    assert row.next_day_actual > 0 and pd.isna(row.one_month_actual) and pd.isna(row.one_month_pct_error)
    first_filled_at = row.filled_at
    # The rest of history arrives: the other horizons fill, next_day is not rewritten.
    ingest_frame(engine, df[df.date > dates[-29]], "synthetic")
    res2 = fillback(engine)
    assert res2.filled == {h: 2 - known[h] for h in NAMES}
    row2 = _rows(engine).iloc[0]
    assert row2.next_day_actual == row.next_day_actual and row2.one_month_actual > 0
    assert row2.filled_at >= first_filled_at


def test_dry_run_lists_pending_and_writes_nothing(engine, world):
    settings, df = world
    dates = sorted(df["date"].unique())
    predict(engine, settings, run_date=dates[-3])  # next_day and maybe next_monday known, one_month not
    before = _rows(engine)
    res = fillback(engine, dry_run=True)
    assert res.dry_run and res.total_filled == 0
    pd.testing.assert_frame_equal(before, _rows(engine))
    horizons = {(p.ticker, p.horizon) for p in res.pending}
    assert {("AAPL", "next_day"), ("QQQ", "next_day")} <= horizons
    assert not any(p.horizon == "one_month" for p in res.pending)
    closes = df.set_index(["ticker", "date"])["close"]
    for p in res.pending:
        assert p.actual == pytest.approx(closes[(p.ticker, p.target_date)])
    real = fillback(engine)
    assert real.total_filled == len(res.pending)


def test_concurrent_fillbacks_fill_each_value_once(engine, world):
    settings, df = world
    for d in sorted(df["date"].unique())[-60:-40]:
        predict(engine, settings, run_date=d)
    results, errors = [], []

    def run():
        try:
            results.append(fillback(engine))
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    total = {h: sum(r.filled[h] for r in results) for h in NAMES}
    assert total == dict.fromkeys(NAMES, 40)


def test_an_action_rebases_only_the_horizons_it_straddles_next_to_plain_rows(engine, world):
    """The rebased rows are filled first and the set-based UPDATE fills the rest: one ticker with a
    recent dividend (some horizons straddle its ex-date), one with an action older than every run date."""
    settings, df = world
    dates = sorted(df["date"].unique())
    for d in dates[-40:-30]:
        predict(engine, settings, run_date=d)
    ex = pd.Timestamp(dates[-35]).date()
    with engine.begin() as conn:
        record_actions(
            conn,
            [
                Action("AAPL", ex, 0.98, "dividend", "test"),
                Action("QQQ", pd.Timestamp(dates[0]).date(), 0.5, "split", "test"),
            ],
        )
    dry = {(p.id, p.horizon): p.actual for p in fillback(engine, dry_run=True).pending}
    res = fillback(engine, neutral_band_pct=0.25)
    assert res.filled == dict.fromkeys(NAMES, 20)
    closes = df.set_index(["ticker", "date"])["close"]
    straddling = 0
    for r in _rows(engine).itertuples():
        for h in NAMES:
            target = getattr(r, f"{h}_date")
            on_basis = r.ticker == "AAPL" and r.run_date < ex <= target
            straddling += on_basis
            want = closes[(r.ticker, target)] / (0.98 if on_basis else 1.0)
            assert getattr(r, f"{h}_actual") == pytest.approx(want, rel=1e-12), (r.ticker, r.run_date, h)
            assert getattr(r, f"{h}_actual") == pytest.approx(dry[(r.id, h)], rel=1e-12)
            pred = getattr(r, f"{h}_pred")
            assert getattr(r, f"{h}_pct_error") == pytest.approx((pred - want) / want * 100, rel=1e-9)
        move = (r.next_day_actual - r.run_date_close) / r.run_date_close * 100
        assert r.next_day_direction_actual == (
            "bullish" if move > 0.25 else "bearish" if move < -0.25 else "neutral"
        )
    assert 0 < straddling < 15  # both paths ran: AAPL's 5 rows straddle on some horizons, not all
    assert fillback(engine).total_filled == 0


def test_the_set_based_fill_carries_no_per_row_action_check(engine, world):
    """A correlated EXISTS on corporate_actions inside the set-based UPDATE made PostgreSQL misplan it
    (a nested loop over the whole table: fillback of 103 x 250 rows 0.8 s -> 11 s+). Without a recorded
    action only the one lookup of the actions table runs; the count and the UPDATE never read it."""
    settings, df = world
    for d in sorted(df["date"].unique())[-40:-35]:
        predict(engine, settings, run_date=d)
    seen: list[str] = []

    def before_cursor_execute(conn, cursor, statement, params, context, executemany):
        seen.append(statement)

    event.listen(engine, "before_cursor_execute", before_cursor_execute)
    try:
        assert fillback(engine).filled == dict.fromkeys(NAMES, 10)
    finally:
        event.remove(engine, "before_cursor_execute", before_cursor_execute)
    updates = [s for s in seen if "UPDATE snapshots" in s]  # on PostgreSQL inside a WITH
    assert len(updates) == 1 and "corporate_actions" not in updates[0]
    assert sum("corporate_actions" in s for s in seen) == 1


def _statements(engine, fn):
    seen: list[str] = []

    def before_cursor_execute(conn, cursor, statement, params, context, executemany):
        seen.append(statement)

    event.listen(engine, "before_cursor_execute", before_cursor_execute)
    try:
        out = fn()
    finally:
        event.remove(engine, "before_cursor_execute", before_cursor_execute)
    return out, seen


def test_fillback_statements_do_not_grow_with_the_pending_rows(engine, world):
    """Set-based: 4 pending rows and 40 cost the same statements. On PostgreSQL the pending join is
    evaluated once (the counts come back from the UPDATE itself), not once to count and once to write."""
    settings, df = world
    dates = sorted(df["date"].unique())
    runs = []
    for evenings in (dates[-60:-58], dates[-50:-30]):
        for d in evenings:
            predict(engine, settings, run_date=d)
        res, seen = _statements(engine, lambda: fillback(engine))
        assert res.filled == dict.fromkeys(NAMES, 2 * len(evenings))
        runs.append(seen)
    assert len(runs[0]) == len(runs[1])
    if engine.dialect.name == "postgresql":
        assert [s for s in runs[1] if "prices" in s and "UPDATE" in s.upper()] == [
            s for s in runs[1] if "prices" in s
        ], "one statement joins the prices: the UPDATE that also counts"


def test_fills_are_written_in_place_on_postgres(pg_url, tmp_path):
    """`snapshots` keeps room on each page (fillfactor, migration 0030) so a fill, which changes no
    indexed column, is a HOT update: the new row version stays on its page and none of the table's
    indexes gets a new entry. Packed full, a 1,000 x 250 catch-up spent ~75 % of its time in those
    index writes. A row that moved page was not written in place."""
    from ldtm_core.db import get_engine

    engine = get_engine(pg_url)
    settings = make_settings(tmp_path, pg_url)
    df = ingest(engine, TICKERS)
    for i, t in enumerate(TICKERS):
        make_model(engine, settings, t, seed=i)
    for d in sorted(df["date"].unique())[-70:-40]:  # 60 rows: several pages
        predict(engine, settings, run_date=d)
    page = text("SELECT id, (ctid::text::point)[0] AS page FROM snapshots ORDER BY id")
    with engine.connect() as conn:
        before = conn.execute(page).all()
        assert len({p for _, p in before}) >= 3
    assert fillback(engine).filled == dict.fromkeys(NAMES, 60)
    with engine.connect() as conn:
        assert conn.execute(page).all() == before
