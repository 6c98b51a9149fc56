"""audit.verify and `ldtm audit verify`: an edit made with raw SQL is found and named.

Covers every hashed column, deleting the newest / a middle row, truncation, rewriting the whole chain
with or without the key, and the actuals recomputed from `prices`.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from accountability_helpers import ingest, make_model, make_settings
from sqlalchemy import select, text, update
from typer.testing import CliRunner

from ldtm_core.accountability.ledger.audit import HASHED_COLUMNS, verify
from ldtm_core.accountability.ledger.chain import AUDIT_KEY_ENV, IN_SAMPLE, parse_heads, row_hash
from ldtm_core.accountability.ledger.fillback import fillback
from ldtm_core.accountability.ledger.snapshots import predict
from ldtm_core.cli import app
from ldtm_core.db import lift_append_only
from ldtm_core.errors import InputError
from ldtm_core.horizons import NAMES
from ldtm_core.schema import run_log, snapshots


@pytest.fixture
def chained(engine, db_url, tmp_path, monkeypatch):
    monkeypatch.delenv(AUDIT_KEY_ENV, raising=False)
    settings = make_settings(tmp_path, db_url)
    df = ingest(engine, ["AAPL", "QQQ"])
    for i, t in enumerate(["AAPL", "QQQ"]):
        make_model(engine, settings, t, seed=i)
    dates = sorted(df["date"].unique())[-30:-22]  # later prices exist: every row can be filled back
    for d in dates:
        predict(engine, settings, run_date=d)
    return dates


def _problems(report):
    return [(p.ticker, p.run_date, p.kind) for p in report.problems]


def test_clean_chain_verifies_also_after_fillback(engine, chained):
    assert fillback(engine).total_filled > 0
    report = verify(engine)
    assert report.ok and report.rows_checked == 16 and report.tickers_checked == 2 and report.problems == []
    assert report.anchors_checked == 16  # one head per ticker per predict run
    assert report.actuals_checked == 16 * len(NAMES)


def test_edited_prediction_is_reported_with_ticker_and_date(engine, chained):
    target = chained[3]
    lift_append_only(engine)  # rewrites the record on purpose: SQLite's append-only triggers off
    with engine.begin() as conn:
        conn.execute(
            text(
                "UPDATE snapshots SET next_day_pred = next_day_pred + 0.01 WHERE ticker = 'QQQ' AND run_date = :d"
            ),
            {"d": target},
        )
    report = verify(engine)
    assert not report.ok
    assert [(p.ticker, p.run_date) for p in report.problems] == [("QQQ", target)]
    assert "prediction changed" in report.problems[0].what
    assert verify(engine, tickers=["AAPL"]).ok


# One UPDATE per hashed column that certainly changes the stored value of one row.
EDITS = {
    "ticker": "ticker = 'MSFT'",
    "run_date": "run_date = one_month_date",
    "run_date_close": "run_date_close = run_date_close * 1.0001",
    "prev_close": "prev_close = prev_close + 1",
    "model_id": "model_id = (SELECT MAX(id) FROM model_registry WHERE ticker = 'QQQ')",
    "model_version": "model_version = 'v9.forged'",
    "mode": "mode = CASE WHEN mode = 'live' THEN 'replay' ELSE 'live' END",
    "next_day_pred": "next_day_pred = next_day_pred + 0.5",
    "next_monday_pred": "next_monday_pred = next_monday_pred - 0.5",
    "one_month_pred": "one_month_pred = one_month_pred * 2",
    "direction_pred": "direction_pred = CASE WHEN direction_pred = 'bullish' THEN 'bearish' ELSE 'bullish' END",
    "next_day_date": "next_day_date = next_monday_date",
    "next_monday_date": "next_monday_date = one_month_date",
    "one_month_date": "one_month_date = next_day_date",
    IN_SAMPLE: "in_sample = NOT in_sample",
}


def test_backdating_or_relabelling_a_prediction_is_detected(engine, chained):
    """Issue 20 item 8b: when and by what a prediction was made is hashed too (chain version 2)."""
    with engine.connect() as conn:
        row_id, version = conn.execute(
            select(snapshots.c.id, snapshots.c.chain_version).where(
                snapshots.c.ticker == "AAPL", snapshots.c.run_date == chained[4]
            )
        ).one()
    assert version >= 2
    _, restore = _restoring(engine, row_id)
    for column, sql in V2_EDITS.items():
        lift_append_only(engine)  # rewrites the record on purpose: SQLite's append-only triggers off
        with engine.begin() as conn:
            n = conn.execute(text(f"UPDATE snapshots SET {sql} WHERE id = :i"), {"i": row_id}).rowcount  # noqa: S608
        assert n == 1, column
        report = verify(engine)
        assert [(p.ticker, p.run_date) for p in report.problems] == [("AAPL", chained[4])], column
        assert "prediction changed" in report.problems[0].what, column
        restore()
    assert verify(engine).ok


# The fields chain version 2 adds: when, in which run and by a model of which status a row was written.
V2_EDITS = {
    "created_at": "created_at = '2020-01-02 21:00:00'",
    "run_id": "run_id = 'forged-run'",
    "model_status": "model_status = CASE WHEN model_status = 'active' THEN 'candidate' ELSE 'active' END",
}


def test_rows_written_under_chain_version_1_still_verify(engine, db_url, tmp_path, monkeypatch):
    """Rows written before version 2 keep their hashes; new rows of the same chain are written v2, and
    relabelling a v2 row as v1 (to escape the fields v2 covers) is caught."""
    from ldtm_core.accountability.ledger import chain

    monkeypatch.delenv(AUDIT_KEY_ENV, raising=False)
    settings = make_settings(tmp_path, db_url)
    df = ingest(engine, ["AAPL"])
    make_model(engine, settings, "AAPL")
    dates = sorted(df["date"].unique())[-6:-2]
    monkeypatch.setattr(chain, "CHAIN_VERSION", 1)
    for d in dates[:2]:
        predict(engine, settings, run_date=d)
    monkeypatch.undo()
    for d in dates[2:]:
        predict(engine, settings, run_date=d)
    with engine.connect() as conn:
        versions = conn.execute(select(snapshots.c.chain_version).order_by(snapshots.c.id)).scalars().all()
    assert versions == [1, 1, chain.CHAIN_VERSION, chain.CHAIN_VERSION]
    assert verify(engine).ok
    lift_append_only(engine)  # rewrites the record on purpose: SQLite's append-only triggers off
    with engine.begin() as conn:  # a v1 row back-dated: not covered by v1, as before
        conn.execute(
            text("UPDATE snapshots SET created_at = '2020-01-02 21:00:00' WHERE run_date = :d"),
            {"d": dates[0]},
        )
    assert verify(engine).ok
    lift_append_only(engine)  # rewrites the record on purpose: SQLite's append-only triggers off
    with engine.begin() as conn:
        conn.execute(text("UPDATE snapshots SET chain_version = 1 WHERE run_date = :d"), {"d": dates[3]})
    problems = verify(engine).problems
    assert [p.run_date for p in problems] == [dates[3], dates[3]]
    assert {p.what.split(":")[0] for p in problems} == {"prediction changed", "chain version went back"}


def test_every_hashed_column_has_an_edit_case():
    assert set(EDITS) == {*HASHED_COLUMNS, IN_SAMPLE}


def _restoring(engine, row_id: int):
    """The row as stored now, and a function that writes it back (one fixture serves every edit case)."""
    with engine.connect() as conn:
        saved = dict(conn.execute(select(snapshots).where(snapshots.c.id == row_id)).mappings().one())

    def restore():
        lift_append_only(engine)  # rewrites the record on purpose: SQLite's append-only triggers off
        with engine.begin() as conn:
            conn.execute(update(snapshots).where(snapshots.c.id == row_id).values(saved))

    return saved, restore


def test_each_hashed_column_is_covered(engine, chained):
    d = chained[2]
    with engine.connect() as conn:
        row_id = conn.execute(
            select(snapshots.c.id).where(snapshots.c.ticker == "AAPL", snapshots.c.run_date == d)
        ).scalar_one()
    saved, restore = _restoring(engine, row_id)
    for column, sql in EDITS.items():
        lift_append_only(engine)  # rewrites the record on purpose: SQLite's append-only triggers off
        with engine.begin() as conn:
            n = conn.execute(text(f"UPDATE snapshots SET {sql} WHERE id = :i"), {"i": row_id}).rowcount  # noqa: S608
            after = conn.execute(select(snapshots.c[column]).where(snapshots.c.id == row_id)).scalar_one()
        assert n == 1 and after != saved[column], column  # the edit really changed the stored value
        report = verify(engine)
        changed = [p for p in report.problems if "prediction changed" in p.what]
        assert len(changed) == 1 and changed[0].run_date in {d, after}, (column, report.problems)
        restore()
        assert verify(engine).ok, column


def test_deleting_the_newest_row_is_detected(engine, chained):
    lift_append_only(engine)  # rewrites the record on purpose: SQLite's append-only triggers off
    with engine.begin() as conn:
        conn.execute(
            text("DELETE FROM snapshots WHERE ticker = 'AAPL' AND run_date = :d"), {"d": chained[-1]}
        )
    report = verify(engine)
    assert not report.ok
    assert _problems(report) == [("AAPL", chained[-1], "anchor")]
    assert "anchored chain head missing" in report.problems[0].what


def test_truncating_a_ticker_is_detected(engine, chained):
    lift_append_only(engine)  # rewrites the record on purpose: SQLite's append-only triggers off
    with engine.begin() as conn:
        conn.execute(text("DELETE FROM snapshots WHERE ticker = 'QQQ' AND run_date >= :d"), {"d": chained[5]})
    report = verify(engine)
    assert {(t, d) for t, d, _ in _problems(report)} == {("QQQ", d) for d in chained[5:]}
    assert verify(engine, tickers=["AAPL"]).ok


def test_deleting_a_middle_row_breaks_the_link(engine, chained):
    lift_append_only(engine)  # rewrites the record on purpose: SQLite's append-only triggers off
    with engine.begin() as conn:
        conn.execute(text("DELETE FROM snapshots WHERE ticker = 'AAPL' AND run_date = :d"), {"d": chained[4]})
    report = verify(engine)
    assert ("AAPL", chained[5], "chain") in _problems(report)
    assert "chain broken" in next(p.what for p in report.problems if p.kind == "chain")
    assert {t for t, _, _ in _problems(report)} == {"AAPL"}


def _rewrite_chain(engine, ticker: str, key: bytes | None = None) -> None:
    """What someone with SQL write access does: edit a prediction and recompute every hash after it."""
    lift_append_only(engine)  # rewrites the record on purpose: SQLite's append-only triggers off
    with engine.begin() as conn:
        conn.execute(
            text("UPDATE snapshots SET next_day_pred = next_day_pred * 1.5 WHERE ticker = :t"), {"t": ticker}
        )
        rows = conn.execute(select(snapshots).where(snapshots.c.ticker == ticker).order_by(snapshots.c.id))
        prev = ""
        for r in rows.mappings().all():
            h = row_hash(prev, r, key)
            conn.execute(
                update(snapshots).where(snapshots.c.id == r["id"]).values(prev_hash=prev, row_hash=h)
            )
            prev = h


def test_rewriting_the_whole_chain_is_caught_by_the_anchors(engine, chained):
    _rewrite_chain(engine, "AAPL")
    report = verify(engine)
    # Every link and hash is self-consistent again; only the anchors outside the table disagree.
    assert {p.kind for p in report.problems} == {"anchor"}
    assert {(t, d) for t, d, _ in _problems(report)} == {("AAPL", d) for d in chained}
    assert all("chain was rewritten" in p.what for p in report.problems)


def test_with_a_key_a_rewrite_without_it_is_caught_even_with_forged_anchors(
    engine, db_url, tmp_path, monkeypatch
):
    monkeypatch.setenv(AUDIT_KEY_ENV, "s3cret-audit-key")
    settings = make_settings(tmp_path, db_url)
    df = ingest(engine, ["AAPL"])
    make_model(engine, settings, "AAPL")
    dates = sorted(df["date"].unique())[-4:]
    for d in dates:
        predict(engine, settings, run_date=d)
    assert verify(engine).ok
    with engine.connect() as conn:
        stored = conn.execute(select(snapshots.c.row_hash).order_by(snapshots.c.id)).scalars().all()
    plain = []
    prev = ""
    with engine.connect() as conn:
        for r in conn.execute(select(snapshots).order_by(snapshots.c.id)).mappings():
            plain.append(row_hash(prev, r))
            prev = r["row_hash"]
    assert stored != plain  # the key is really used
    _rewrite_chain(engine, "AAPL", key=None)
    # ... and the attacker also rewrites the run_log anchors to match the forged chain
    with engine.begin() as conn:
        heads = conn.execute(
            select(snapshots.c.id, snapshots.c.row_hash, snapshots.c.run_date, snapshots.c.model_version)
        ).all()
        for run_id, blob in conn.execute(select(run_log.c.run_id, run_log.c.chain_heads_json)).all():
            if blob is None:
                continue
            anchor = json.loads(blob)
            i = anchor["heads"]["AAPL"][0]
            h = next(x for x in heads if x.id == i)
            anchor["heads"]["AAPL"] = [i, h.row_hash, str(h.run_date), h.model_version]
            conn.execute(
                update(run_log).where(run_log.c.run_id == run_id).values(chain_heads_json=json.dumps(anchor))
            )
    report = verify(engine)
    assert not report.ok
    assert {p.run_date for p in report.problems} == set(dates)
    assert all("without LDTM_AUDIT_KEY" in p.what for p in report.problems)
    monkeypatch.delenv(AUDIT_KEY_ENV)
    with pytest.raises(InputError, match="set LDTM_AUDIT_KEY"):
        verify(engine)


def test_external_anchors_from_another_store_are_compared(engine, chained):
    with engine.connect() as conn:
        head = conn.execute(
            select(snapshots.c.id, snapshots.c.row_hash, snapshots.c.run_date, snapshots.c.model_version)
            .where(snapshots.c.ticker == "AAPL")
            .order_by(snapshots.c.id.desc())
            .limit(1)
        ).one()
    good = parse_heads({"AAPL": [head.id, head.row_hash, str(head.run_date), head.model_version]}, "dagster")
    assert verify(engine, extra_anchors=good).ok
    # The table and run_log both lose the newest row and its anchor: the other store still knows it.
    lift_append_only(engine)  # rewrites the record on purpose: SQLite's append-only triggers off
    with engine.begin() as conn:
        conn.execute(text("DELETE FROM snapshots WHERE id = :i"), {"i": head.id})
        conn.execute(update(run_log).values(chain_heads_json=None))
    assert verify(engine).ok  # nothing left inside the database to compare with
    report = verify(engine, extra_anchors=good)
    assert _problems(report) == [("AAPL", head.run_date, "anchor")]
    assert "dagster" in report.problems[0].what


ACTUAL_EDITS = [
    ("next_day_actual", "next_day_actual = next_day_actual + 1"),
    ("next_monday_actual", "next_monday_actual = next_monday_actual * 1.01"),
    ("one_month_actual", "one_month_actual = 1.0"),
    ("next_day_pct_error", "next_day_pct_error = next_day_pct_error + 0.1"),
    ("one_month_pct_error", "one_month_pct_error = -one_month_pct_error - 1"),
    (
        "next_day_direction_correct",
        "next_day_direction_correct = CASE WHEN next_day_direction_correct THEN false ELSE true END",
    ),
    (
        "next_day_direction_actual",
        "next_day_direction_actual = CASE WHEN next_day_direction_actual = 'bullish' "
        "THEN 'bearish' ELSE 'bullish' END",
    ),
]


def test_an_edited_actual_is_recomputed_from_prices(engine, chained):
    fillback(engine)
    assert verify(engine).ok
    with engine.connect() as conn:
        row_id = conn.execute(
            select(snapshots.c.id).where(snapshots.c.ticker == "QQQ", snapshots.c.run_date == chained[6])
        ).scalar_one()
    _, restore = _restoring(engine, row_id)
    for column, sql in ACTUAL_EDITS:
        lift_append_only(engine)  # rewrites the record on purpose: SQLite's append-only triggers off
        with engine.begin() as conn:
            n = conn.execute(text(f"UPDATE snapshots SET {sql} WHERE id = :i"), {"i": row_id}).rowcount  # noqa: S608
        assert n == 1
        report = verify(engine)
        assert _problems(report) == [("QQQ", chained[6], "actual")], column
        assert column in report.problems[0].what
        restore()
    assert verify(engine).ok


def test_an_actual_whose_price_changed_or_vanished_is_reported(engine, chained):
    fillback(engine)
    with engine.connect() as conn:
        nd = conn.execute(
            select(snapshots.c.next_day_date).where(
                snapshots.c.ticker == "AAPL", snapshots.c.run_date == chained[0]
            )
        ).scalar_one()
    with engine.begin() as conn:
        conn.execute(
            text("UPDATE prices SET close = close * 1.02 WHERE ticker = 'AAPL' AND date = :d"), {"d": nd}
        )
    report = verify(engine)
    # the changed close is the next-day target of chained[0] (and maybe the Monday target too)
    assert ("AAPL", chained[0], "actual") in _problems(report)
    assert "!= close" in report.problems[0].what


def test_cli_exits_non_zero_and_lists_bad_rows(engine, chained, ldtm_env):
    runner = CliRunner()
    ok = runner.invoke(app, ["audit", "verify"])
    assert ok.exit_code == 0, ok.output
    assert "16 rows" in ok.output
    lift_append_only(engine)  # rewrites the record on purpose: SQLite's append-only triggers off
    with engine.begin() as conn:
        conn.execute(
            text("UPDATE snapshots SET one_month_pred = 1.0 WHERE ticker = 'AAPL' AND run_date = :d"),
            {"d": chained[1]},
        )
    bad = runner.invoke(app, ["audit", "verify"])
    assert bad.exit_code == 1
    assert "AAPL" in bad.output and str(chained[1]) in bad.output


def test_cli_names_a_ticker_without_rows(engine, chained, ldtm_env):
    res = CliRunner().invoke(app, ["audit", "verify", "--tickers", "ZZZZ"])
    assert res.exit_code == 1, res.output
    assert "no snapshot rows for ZZZZ" in res.output
    assert "audit ok" not in res.output
    mixed = CliRunner().invoke(app, ["audit", "verify", "--tickers", "AAPL", "--tickers", "ZZZZ"])
    assert mixed.exit_code == 1 and "ZZZZ" in mixed.output


def test_each_row_is_judged_with_the_band_it_was_predicted_with(engine, db_url, tmp_path, monkeypatch):
    """Changing LDTM_NEUTRAL_BAND_PCT later must not flag old rows; a row predicted with another band
    has its actual direction judged with that band (rows from before the band was stored: 0.25 %)."""
    monkeypatch.delenv(AUDIT_KEY_ENV, raising=False)
    monkeypatch.delenv("LDTM_NEUTRAL_BAND_PCT", raising=False)
    settings = make_settings(tmp_path, db_url)
    df = ingest(engine, ["AAPL"])
    make_model(engine, settings, "AAPL")
    dates = sorted(df["date"].unique())[-40:-20]
    for d in dates[:10]:
        predict(engine, settings, run_date=d)  # the default band, 0.25 %
    for d in dates[10:]:
        predict(engine, settings, run_date=d, neutral_band_pct=1.0)
    fillback(engine)
    monkeypatch.setenv("LDTM_NEUTRAL_BAND_PCT", "2.0")  # the setting changes after the rows were judged
    assert _problems(verify(engine)) == []
    rows = _rows(engine).sort_values("run_date")
    move = (rows["next_day_actual"] - rows["run_date_close"]) / rows["run_date_close"] * 100
    assert ((move.abs() > 0.25) & (move.abs() <= 2.0)).any()  # rows the new setting would judge otherwise
    assert rows["neutral_band_pct"].tolist() == [0.25] * 10 + [1.0] * 10
    for band, m, got in zip(rows["neutral_band_pct"], move, rows["next_day_direction_actual"], strict=True):
        assert got == ("bullish" if m > band else "bearish" if m < -band else "neutral")
    # Rows written before the band was stored carry NULL: the default they were judged with, 0.25 %.
    lift_append_only(engine)  # rewrites the record on purpose: SQLite's append-only triggers off
    with engine.begin() as conn:
        conn.execute(
            update(snapshots).where(snapshots.c.neutral_band_pct == 0.25).values(neutral_band_pct=None)
        )
    assert _problems(verify(engine)) == []


def _rows(engine):
    import pandas as pd

    with engine.connect() as conn:
        return pd.DataFrame(conn.execute(select(snapshots).order_by(snapshots.c.id)).mappings().all())


def test_a_mixed_v2_v3_chain_verifies_and_a_recorded_baseline_call_is_covered(
    engine, db_url, tmp_path, monkeypatch
):
    """Chain version 3 (issue 39 item 1): each board baseline's call is recorded with the prediction and
    hashed; rows written under version 2 keep verifying beside them. Editing a recorded call is a
    changed prediction; a call that does not follow from the row's own closes is named even when the
    hash was computed over it."""
    import json

    from ldtm_core.accountability.ledger import chain

    monkeypatch.delenv(AUDIT_KEY_ENV, raising=False)
    settings = make_settings(tmp_path, db_url)
    df = ingest(engine, ["AAPL"])
    make_model(engine, settings, "AAPL")
    dates = sorted(df["date"].unique())[-6:-2]
    monkeypatch.setattr(chain, "CHAIN_VERSION", 2)
    for d in dates[:2]:
        predict(engine, settings, run_date=d)
    monkeypatch.undo()
    for d in dates[2:]:
        predict(engine, settings, run_date=d)
    with engine.connect() as conn:
        rows = conn.execute(
            select(
                snapshots.c.id,
                snapshots.c.chain_version,
                snapshots.c.baseline_calls,
                snapshots.c.run_date_close,
                snapshots.c.prev_close,
            ).order_by(snapshots.c.id)
        ).all()
    assert [r.chain_version for r in rows] == [2, 2, 3, 3]
    calls = json.loads(rows[3].baseline_calls)
    assert set(calls) == {"always_up", "persistence", "trend"} and calls["always_up"] == 1
    assert calls["persistence"] == (1 if rows[3].run_date_close > rows[3].prev_close else -1)
    # The trailing-21 majority of the 21 moves up to the run date, from the ticker's closes that evening.
    close = df.sort_values("date")["close"].to_numpy(float)
    at = sorted(df["date"].unique()).index(dates[3])
    moves = np.sign(np.diff(close[at - 21 : at + 1]))
    assert len(moves) == 21 and calls["trend"] == (-1 if moves.sum() < 0 else 1)
    assert verify(engine).ok
    _, restore = _restoring(engine, rows[3].id)
    flipped = json.dumps({**calls, "persistence": -calls["persistence"]})
    lift_append_only(engine)  # rewrites the record on purpose: SQLite's append-only triggers off
    with engine.begin() as conn:
        conn.execute(update(snapshots).where(snapshots.c.id == rows[3].id).values(baseline_calls=flipped))
    problems = verify(engine).problems
    assert [p.run_date for p in problems] == [dates[3], dates[3]]
    assert {p.what.split(":")[0] for p in problems} == {
        "prediction changed",
        "baseline call does not follow from the recorded closes",
    }
    restore()
    assert verify(engine).ok
    lift_append_only(engine)  # rewrites the record on purpose: SQLite's append-only triggers off
    with engine.begin() as conn:  # a v2 row's unhashed calls are not its evidence: no problem, not read
        conn.execute(update(snapshots).where(snapshots.c.id == rows[0].id).values(baseline_calls=flipped))
    assert verify(engine).ok
