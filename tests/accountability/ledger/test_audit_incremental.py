"""The nightly audit verifies what is new since the last verified anchor; the full audit everything.

A passing whole-store audit records each ticker's chain head (id, hash) in run_log (kind 'audit'). The
incremental audit re-checks that head and recomputes only the rows after it, the anchors recorded since,
and the actuals filled since: an edit after the anchor is caught at once, a rewrite before it too (the
head's hash covers everything before it), and a silent edit before it by the full (weekly) audit.
"""

from __future__ import annotations

import datetime as dt

import pytest
from accountability_helpers import ingest, make_model, make_settings
from sqlalchemy import select, text, update
from typer.testing import CliRunner

from ldtm_core.accountability.ledger.audit import verify
from ldtm_core.accountability.ledger.chain import AUDIT_KEY_ENV, row_hash
from ldtm_core.accountability.ledger.fillback import fillback
from ldtm_core.accountability.ledger.snapshots import predict
from ldtm_core.cli import app
from ldtm_core.db import lift_append_only
from ldtm_core.schema import run_log, snapshots


@pytest.fixture
def store(engine, db_url, tmp_path, monkeypatch):
    monkeypatch.delenv(AUDIT_KEY_ENV, raising=False)
    settings = make_settings(tmp_path, db_url)
    df = ingest(engine, ["AAPL", "QQQ"])
    for i, t in enumerate(["AAPL", "QQQ"]):
        make_model(engine, settings, t, seed=i)
    dates = sorted(df["date"].unique())[-40:-22]  # later prices exist: every row can be filled back
    for d in dates[:6]:
        predict(engine, settings, run_date=d)
    return settings, dates


def _evenings(engine, settings, dates):
    for d in dates:
        predict(engine, settings, run_date=d)


def _problems(report):
    return [(p.ticker, p.run_date, p.kind) for p in report.problems]


def test_incremental_checks_only_the_rows_after_the_verified_anchor(engine, store):
    settings, dates = store
    full = verify(engine, record=True)
    assert full.ok and full.mode == "full" and full.rows_checked == 12
    _evenings(engine, settings, dates[6:8])
    report = verify(engine, mode="incremental", record=True)
    assert report.ok and report.mode == "incremental", report.problems
    assert report.rows_checked == 4  # 2 evenings x 2 tickers
    assert report.anchors_checked == 2 * 2 + 2  # the new runs' heads and the verified heads
    # The next night starts from this one's heads.
    _evenings(engine, settings, dates[8:9])
    assert verify(engine, mode="incremental").rows_checked == 2


def test_without_a_verified_anchor_the_incremental_audit_is_full(engine, store):
    report = verify(engine, mode="incremental")
    assert report.ok and report.mode == "full" and report.rows_checked == 12


def test_an_edit_after_the_anchor_is_caught(engine, store):
    settings, dates = store
    assert verify(engine, record=True).ok
    _evenings(engine, settings, dates[6:9])
    lift_append_only(engine)  # rewrites the record on purpose: SQLite's append-only triggers off
    with engine.begin() as conn:
        conn.execute(
            text(
                "UPDATE snapshots SET one_month_pred = one_month_pred + 1 WHERE ticker = 'QQQ' AND run_date = :d"
            ),
            {"d": dates[7]},
        )
    report = verify(engine, mode="incremental", record=True)
    assert _problems(report) == [("QQQ", dates[7], "chain")]
    # A failed audit records no new anchor: the next night reports it again.
    assert _problems(verify(engine, mode="incremental")) == [("QQQ", dates[7], "chain")]


def test_deleting_a_new_newest_row_is_caught(engine, store):
    settings, dates = store
    assert verify(engine, record=True).ok
    _evenings(engine, settings, dates[6:8])
    lift_append_only(engine)  # rewrites the record on purpose: SQLite's append-only triggers off
    with engine.begin() as conn:
        conn.execute(text("DELETE FROM snapshots WHERE ticker = 'AAPL' AND run_date = :d"), {"d": dates[7]})
    report = verify(engine, mode="incremental")
    assert ("AAPL", dates[7], "anchor") in _problems(report)


def test_a_silent_edit_before_the_anchor_is_left_to_the_full_audit(engine, store):
    settings, dates = store
    assert verify(engine, record=True).ok
    _evenings(engine, settings, dates[6:7])
    lift_append_only(engine)  # rewrites the record on purpose: SQLite's append-only triggers off
    with engine.begin() as conn:
        conn.execute(
            text(
                "UPDATE snapshots SET next_day_pred = next_day_pred + 1 WHERE ticker = 'AAPL' AND run_date = :d"
            ),
            {"d": dates[2]},
        )
    assert verify(engine, mode="incremental").ok  # not recomputed: the weekly full audit's job
    assert _problems(verify(engine)) == [("AAPL", dates[2], "chain")]
    # `auto` is full once the last full audit is older than a week.
    later = dt.datetime.now(dt.UTC) + dt.timedelta(days=8)
    assert _problems(verify(engine, mode="auto", now=later)) == [("AAPL", dates[2], "chain")]
    assert verify(engine, mode="auto").mode == "incremental"


def test_a_rewrite_before_the_anchor_is_caught_by_the_verified_head(engine, store):
    settings, dates = store
    assert verify(engine, record=True).ok
    _evenings(engine, settings, dates[6:7])
    # Edit an old prediction and recompute every hash after it (run_log anchors forged as well).
    lift_append_only(engine)  # rewrites the record on purpose: SQLite's append-only triggers off
    with engine.begin() as conn:
        conn.execute(text("UPDATE snapshots SET next_day_pred = next_day_pred * 1.5 WHERE ticker = 'AAPL'"))
        prev = ""
        rows = conn.execute(select(snapshots).where(snapshots.c.ticker == "AAPL").order_by(snapshots.c.id))
        for r in rows.mappings().all():
            h = row_hash(prev, r)
            conn.execute(
                update(snapshots).where(snapshots.c.id == r["id"]).values(prev_hash=prev, row_hash=h)
            )
            prev = h
        conn.execute(update(run_log).where(run_log.c.kind == "predict").values(chain_heads_json=None))
    report = verify(engine, mode="incremental")
    assert not report.ok
    assert any("verified" in p.what and p.ticker == "AAPL" for p in report.problems), report.problems


def test_an_actual_filled_after_the_anchor_is_recomputed(engine, store):
    settings, dates = store
    assert verify(engine, record=True).ok
    assert fillback(engine).total_filled > 0
    lift_append_only(engine)  # rewrites the record on purpose: SQLite's append-only triggers off
    with engine.begin() as conn:
        conn.execute(
            text(
                "UPDATE snapshots SET next_day_actual = next_day_actual + 1 WHERE ticker = 'QQQ' AND run_date = :d"
            ),
            {"d": dates[1]},
        )
    report = verify(engine, mode="incremental")
    assert _problems(report) == [("QQQ", dates[1], "actual")]
    assert report.actuals_checked == 12 * 3


def test_cli_incremental_option(engine, store, ldtm_env):
    runner = CliRunner()
    first = runner.invoke(app, ["audit", "verify"])
    assert first.exit_code == 0, first.output
    assert "full" in first.output
    again = runner.invoke(app, ["audit", "verify", "--incremental"])
    assert again.exit_code == 0, again.output
    assert "incremental" in again.output and "0 rows" in again.output
