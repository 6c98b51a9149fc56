"""Issue 20 item 1: ordinary events (a revised bar, a split recorded late, a key set later) must not jam
the audit for good; they are re-filled through one logged path, while edits by hand still block."""

from __future__ import annotations

import pytest
from accountability_helpers import ingest, make_model, make_settings
from sqlalchemy import select, text, update

from ldtm_core.accountability.ledger.audit import verify
from ldtm_core.accountability.ledger.chain import AUDIT_KEY_ENV, row_hash
from ldtm_core.accountability.ledger.fillback import fillback
from ldtm_core.accountability.ledger.refill import refill, refill_after_ingest
from ldtm_core.accountability.ledger.snapshots import predict
from ldtm_core.data.corporate_actions import Action, record_actions
from ldtm_core.data.ingest import ingest_frame
from ldtm_core.data.synthetic_market import generate
from ldtm_core.db import lift_append_only
from ldtm_core.schema import fill_revisions, snapshots


@pytest.fixture
def recent(engine, db_url, tmp_path, monkeypatch):
    """AAPL predicted on sessions whose next-day targets are inside the revision window, filled back."""
    monkeypatch.delenv(AUDIT_KEY_ENV, raising=False)
    settings = make_settings(tmp_path, db_url)
    df = ingest(engine, ["AAPL"])
    make_model(engine, settings, "AAPL")
    dates = sorted(df["date"].unique())
    for d in [dates[-30], *dates[-4:-1]]:
        predict(engine, settings, run_date=d)
    fillback(engine)
    assert verify(engine).ok
    return settings, df, dates


def _row(engine, run_date):
    with engine.connect() as conn:
        return conn.execute(
            select(snapshots).where(snapshots.c.ticker == "AAPL", snapshots.c.run_date == run_date)
        ).one()


def _revise(engine, df, day, factor=1.01, force=None):
    bar = df[(df["ticker"] == "AAPL") & (df["date"] == day)].copy()
    for c in ("open", "high", "low", "close"):
        bar[c] = bar[c] * factor
    ingest_frame(engine, bar, "vendor", force=force)


def test_a_revised_bar_inside_the_window_is_refilled_and_logged(engine, recent):
    settings, df, dates = recent
    target = dates[-2]  # next-day target of dates[-3]: revised by the overlap fetch by design
    old = _row(engine, dates[-3]).next_day_actual
    _revise(engine, df, target)
    report = verify(engine)
    # Not tampering: reported as stale with its reason, not as a problem that blocks the nightly.
    assert report.ok, [p.what for p in report.problems]
    assert [(s.run_date, s.horizon) for s in report.stale] == [(dates[-3], "next_day")]
    assert "revised by vendor" in report.stale[0].reason
    dry = refill(engine, dry_run=True, automatic=True)
    assert [s.id for s in dry.refilled] == [_row(engine, dates[-3]).id]
    assert _row(engine, dates[-3]).next_day_actual == old  # the dry run wrote nothing
    done = refill(engine, automatic=True)
    assert len(done.refilled) == 1 and not done.unexplained
    row = _row(engine, dates[-3])
    assert row.next_day_actual == pytest.approx(old * 1.01)
    assert row.next_day_pct_error == pytest.approx(
        (row.next_day_pred - row.next_day_actual) / row.next_day_actual * 100
    )
    report = verify(engine)
    assert report.ok and not report.stale
    # The old value stays visible, with the reason.
    [rev] = report.revisions
    assert (rev["snapshot_id"], rev["horizon"], rev["old_actual"]) == (row.id, "next_day", old)
    assert rev["new_actual"] == pytest.approx(old * 1.01) and "revised" in rev["reason"]
    assert refill(engine, automatic=True).refilled == []  # idempotent


def test_edits_by_hand_still_block_and_are_not_refilled(engine, recent):
    settings, df, dates = recent
    lift_append_only(engine)  # rewrites the record on purpose: SQLite's append-only triggers off
    with engine.begin() as conn:  # a price edited with SQL: no ingest recorded it
        conn.execute(
            text("UPDATE prices SET close = close * 1.02 WHERE ticker = 'AAPL' AND date = :d"),
            {"d": dates[-2]},
        )
        conn.execute(
            update(snapshots)
            .where(snapshots.c.run_date == dates[-30])
            .values(next_day_actual=snapshots.c.next_day_actual + 1)
        )
    report = verify(engine)
    assert {(p.run_date, p.kind) for p in report.problems} == {(dates[-3], "actual"), (dates[-30], "actual")}
    assert refill(engine).refilled == []
    with engine.connect() as conn:
        assert conn.execute(select(fill_revisions)).all() == []


def test_a_split_recorded_after_the_fill_is_refilled(engine, db_url, tmp_path, monkeypatch):
    monkeypatch.delenv(AUDIT_KEY_ENV, raising=False)
    settings = make_settings(tmp_path, db_url)
    df = generate(["AAPL"], "2023-01-03", "2024-06-28", seed=7)
    dates = sorted(df["date"].unique())
    ex = dates[-3]
    after = df["date"] >= ex  # a 4:1 split: raw bars from the ex-date on are a quarter
    for c in ("open", "high", "low", "close"):
        df.loc[after, c] = df.loc[after, c] / 4
    ingest_frame(engine, df, "vendor")
    make_model(engine, settings, "AAPL")
    predict(engine, settings, run_date=dates[-4])
    fillback(engine)
    row = _row(engine, dates[-4])
    assert row.next_day_pct_error > 200  # the raw quarter close filled as the actual: a -75 % "day"
    with engine.begin() as conn:
        record_actions(conn, [Action("AAPL", ex, 0.25, "split", "late feed")])
    report = verify(engine)
    assert report.ok and "next_day" in {s.horizon for s in report.stale}
    assert all("recorded after the fill" in s.reason for s in report.stale)
    assert len(refill(engine, automatic=True).refilled) == len(report.stale)
    row = _row(engine, dates[-4])
    raw = df.set_index("date").loc[dates[-3], "close"]
    assert row.next_day_actual == pytest.approx(raw * 4)
    assert abs(row.next_day_pct_error) < 20
    assert verify(engine).ok


def test_a_key_set_after_rows_exist_applies_from_then_on(engine, recent, monkeypatch):
    settings, df, dates = recent
    monkeypatch.setenv(AUDIT_KEY_ENV, "set-later")
    assert verify(engine).ok  # history written without the key is not flagged
    predict(engine, settings, run_date=dates[-2])  # a rerun: writes nothing, anchors the unkeyed head keyed
    assert verify(engine).ok
    predict(engine, settings, run_date=dates[-1])  # the first keyed row
    report = verify(engine)
    assert report.ok, [p.what for p in report.problems]
    # A keyed row rewritten without the key is still caught, and so is a rewrite of an old unkeyed row.
    lift_append_only(engine)  # rewrites the record on purpose: SQLite's append-only triggers off
    with engine.begin() as conn:
        newest = conn.execute(select(snapshots).order_by(snapshots.c.id.desc()).limit(1)).mappings().one()
        forged = dict(newest, next_day_pred=newest["next_day_pred"] * 2)
        conn.execute(
            update(snapshots)
            .where(snapshots.c.id == newest["id"])
            .values(next_day_pred=forged["next_day_pred"], row_hash=row_hash(newest["prev_hash"], forged))
        )
    problems = verify(engine).problems
    assert any("without LDTM_AUDIT_KEY" in p.what and p.run_date == dates[-1] for p in problems)


def test_cli_refill_dry_run_then_refill_and_audit_lists_it(engine, recent, ldtm_env):
    """A forced re-ingest of older history: stale (explained, the audit passes), not re-filled by the
    nightly's automatic pass, listed by the dry run, re-filled by --refill, listed by the audit."""
    from typer.testing import CliRunner

    from ldtm_core.cli import app

    settings, df, dates = recent
    run = CliRunner().invoke
    old = _row(engine, dates[-30]).next_day_actual
    _revise(engine, df, _row(engine, dates[-30]).next_day_date, force=True)
    dry = run(app, ["fillback", "--refill", "--dry-run"])
    assert dry.exit_code == 0 and "1 pending re-fills" in dry.output and "revised by vendor" in dry.output
    assert _row(engine, dates[-30]).next_day_actual == old
    assert verify(engine).ok and [st.run_date for st in verify(engine).stale] == [dates[-30]]
    auto = run(app, ["fillback"])
    assert "ldtm fillback --refill" in auto.stderr and _row(engine, dates[-30]).next_day_actual == old
    done = run(app, ["fillback", "--refill"])
    assert done.exit_code == 0 and "re-filled 1" in done.output
    assert _row(engine, dates[-30]).next_day_actual == pytest.approx(old * 1.01)
    audit = run(app, ["audit", "verify"])
    assert audit.exit_code == 0 and "1 re-fills" in audit.output and f"{old:.4f}" in audit.output


def test_recording_a_split_from_an_ingest_refills_at_once(engine, db_url, tmp_path, monkeypatch):
    """The action arrives with back-adjusted history a day late: the ingest reports the ticker that got an
    action, and its caller (`refill_after_ingest`, what the prices asset and `ldtm ingest` run) re-fills
    the actuals it explains at once, before any leaderboard reads them."""
    monkeypatch.delenv(AUDIT_KEY_ENV, raising=False)
    settings = make_settings(tmp_path, db_url)
    df = generate(["AAPL"], "2024-01-02", "2024-06-28", seed=7)
    dates = sorted(df["date"].unique())
    ex = dates[-2]
    raw = df.copy()
    raw.loc[raw["date"] >= ex, ["open", "high", "low", "close"]] /= 4
    ingest_frame(engine, raw[raw["date"] <= ex], "vendor")
    make_model(engine, settings, "AAPL")
    predict(engine, settings, run_date=dates[-3])
    fillback(engine)
    assert _row(engine, dates[-3]).next_day_pct_error > 200
    adjusted = raw[raw["date"] >= dates[-6]].copy()  # the source's overlap, rewritten on the new basis
    adjusted.loc[adjusted["date"] < ex, ["open", "high", "low", "close"]] /= 4
    result = ingest_frame(engine, adjusted, "vendor")
    assert result.action_tickers == ["AAPL"]
    assert _row(engine, dates[-3]).next_day_pct_error > 200  # the data layer re-fills nothing itself
    assert len(refill_after_ingest(engine, result).refilled) == 1
    row = _row(engine, dates[-3])
    assert row.next_day_actual == pytest.approx(df.set_index("date").loc[ex, "close"])
    assert abs(row.next_day_pct_error) < 20
    with engine.connect() as conn:
        [rev] = conn.execute(select(fill_revisions)).all()
    assert "split" in rev.reason and rev.old_actual == pytest.approx(rev.new_actual / 4)
    assert verify(engine).ok


def test_a_revision_outside_the_window_stays_refillable_after_a_later_horizon_fills(
    engine, db_url, tmp_path, monkeypatch
):
    """Issue 28 item 5: next day filled, its bar revised by a forced re-ingest outside the overlap window
    (the nightly leaves it to --refill), then the one-month fill: still stale, and --refill fixes it."""
    monkeypatch.delenv(AUDIT_KEY_ENV, raising=False)
    settings = make_settings(tmp_path, db_url)
    df = generate(["AAPL"], "2023-01-03", "2024-06-28", seed=7)
    dates = sorted(df["date"].unique())
    run_date = dates[-40]
    ingest_frame(engine, df[df["date"] <= dates[-35]], "synthetic")  # the next day is there, the month not
    make_model(engine, settings, "AAPL")
    predict(engine, settings, run_date=run_date)
    fillback(engine)
    row = _row(engine, run_date)
    assert row.next_day_actual is not None and row.one_month_actual is None
    ingest_frame(engine, df[df["date"] > dates[-35]], "synthetic")  # the month's close arrives later
    _revise(engine, df, dates[-39], factor=0.98, force=True)  # a forced re-ingest, far outside the window
    nightly = refill(engine, automatic=True)
    assert [(s.run_date, s.horizon) for s in nightly.left] == [(run_date, "next_day")]
    fillback(engine)  # the month (and Monday) fill: before, it bumped the one filled_at of the row
    assert _row(engine, run_date).one_month_actual is not None
    report = verify(engine)
    assert report.ok, [p.what for p in report.problems]
    assert [(s.run_date, s.horizon) for s in report.stale] == [(run_date, "next_day")]
    done = refill(engine)
    assert [(s.run_date, s.horizon) for s in done.refilled] == [(run_date, "next_day")]
    row = _row(engine, run_date)
    assert row.next_day_actual == pytest.approx(
        df.set_index("date").loc[dates[-39], "close"] * 0.98, rel=1e-9
    )
    report = verify(engine)
    assert report.ok and not report.stale and not report.problems
