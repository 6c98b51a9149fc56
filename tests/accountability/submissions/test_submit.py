"""Submitted forecasts (accountability.submissions): a model LDTM cannot run submits files that are checked
whole, recorded chained beside the published rows (never published until promoted), refused with a named
error and nothing written, judged on their live record, promoted, and replaced by the previous champion on
an evening their submission is missing."""

from __future__ import annotations

import datetime as dt
import math
import re

import numpy as np
import pandas as pd
import pytest
from sqlalchemy import func, select, text

from ldtm_core.accountability.ledger.audit import verify
from ldtm_core.accountability.ledger.fillback import fillback
from ldtm_core.accountability.ledger.refill import refill
from ldtm_core.accountability.ledger.snapshots import predict
from ldtm_core.accountability.submissions import external, judge
from ldtm_core.accountability.submissions.submit import SubmissionError, cutoff, submit
from ldtm_core.data.calendar import session_close, sessions_between
from ldtm_core.horizons import HORIZONS
from ldtm_core.learning import registry
from ldtm_core.schema import fill_revisions, snapshots
from tests.accountability_helpers import ingest, make_model, make_settings

TICKERS = ["AAA", "BBB", "CCC"]


@pytest.fixture
def store(engine, tmp_path, monkeypatch):
    monkeypatch.delenv("LDTM_SUBMISSION_CUTOFF_MIN", raising=False)
    prices = ingest(engine, TICKERS, start="2023-01-03", end="2023-12-29")
    settings = make_settings(tmp_path, str(engine.url))
    external.register(engine, "desk", TICKERS, "a desk's model")
    return engine, settings, prices.assign(date=pd.to_datetime(prices["date"]))


def _file(tmp_path, day, returns: dict[str, float], name="sub.csv", **extra) -> str:
    rows = [
        {"ticker": t, "run_date": day.isoformat(), "horizon": h.name, "expected_return": r, **extra}
        for t, r in returns.items()
        for h in HORIZONS
    ]
    path = tmp_path / name
    pd.DataFrame(rows).to_csv(path, index=False)
    return str(path)


def _evening(day: dt.date) -> dt.datetime:
    return session_close(day) + dt.timedelta(hours=1)


def _count(engine) -> int:
    with engine.connect() as conn:
        return conn.execute(select(func.count()).select_from(snapshots)).scalar_one()


def test_a_submission_is_recorded_chained_unpublished_and_never_replaced(store, tmp_path):
    engine, settings, prices = store
    day = dt.date(2023, 6, 1)
    path = _file(tmp_path, day, {"AAA": 0.01, "BBB": -0.02, "CCC": 0.0})
    res = submit(engine, settings, "desk", path, at=_evening(day))
    assert (res.rows_written, res.mode, res.tickers) == (3, "live", TICKERS)
    with engine.connect() as conn:
        rows = {r.ticker: r for r in conn.execute(select(snapshots).where(snapshots.c.run_date == day))}
    close = prices.set_index(["ticker", "date"])["close"]
    for t, r in (("AAA", 0.01), ("BBB", -0.02)):
        want = close[(t, pd.Timestamp(day))] * math.exp(r)
        assert rows[t].next_day_pred == pytest.approx(want) and rows[t].model_status == registry.EXTERNAL
    assert rows["AAA"].direction_pred == "bullish" and rows["BBB"].direction_pred == "bearish"
    assert rows["CCC"].direction_pred == "neutral" and rows["AAA"].baseline_calls
    assert verify(engine).ok
    # The same file again is a no-op; other values for a recorded evening are refused, nothing written.
    assert submit(engine, settings, "desk", path, at=_evening(day)).rows_existing == 3
    changed = _file(tmp_path, day, {"AAA": 0.02, "BBB": -0.02, "CCC": 0.0}, name="changed.csv")
    with pytest.raises(SubmissionError, match="AAA 2023-06-01 was already submitted with other forecasts"):
        submit(engine, settings, "desk", changed, at=_evening(day))
    assert _count(engine) == 3


def test_bad_submissions_are_refused_by_name_with_nothing_written(store, tmp_path):
    engine, settings, _ = store
    day = dt.date(2023, 6, 1)
    ok = {"AAA": 0.01}

    def refused(path, match, name="desk", at=None):
        with pytest.raises(Exception, match=match):
            submit(engine, settings, name, path, at=at or _evening(day))

    refused(_file(tmp_path, day, {"ZZZ": 0.01}), "row 2: 'ZZZ' is not a ticker this model is registered for")
    refused(_file(tmp_path, day, {"AAA": float("inf")}), "row 2: expected_return inf is not a finite")
    refused(_file(tmp_path, dt.date(2023, 6, 3), ok), "run date 2023-06-03 is not an XNYS trading session")
    refused(
        _file(tmp_path, dt.date(2024, 3, 1), ok),
        "AAA has no stored close on 2024-03-01",
        at=_evening(dt.date(2024, 3, 1)),
    )
    refused(
        _file(tmp_path, day, ok, direction="bearish"), "row 2: direction bearish contradicts expected_return"
    )
    refused(_file(tmp_path, day, ok), "external model 'nobody' is not registered", name="nobody")
    dup = pd.read_csv(_file(tmp_path, day, ok))
    pd.concat([dup, dup.iloc[[0]]]).to_csv(tmp_path / "dup.csv", index=False)
    refused(str(tmp_path / "dup.csv"), "row 5: duplicate of row 2")
    dup.iloc[1:].to_csv(tmp_path / "short.csv", index=False)
    refused(str(tmp_path / "short.csv"), f"AAA 2023-06-01 lacks the {HORIZONS[0].name} horizon")
    dup.assign(expected_return=None).to_csv(tmp_path / "empty.csv", index=False)
    refused(str(tmp_path / "empty.csv"), "row 2: gives neither an expected_return nor a direction")
    dup.assign(expected_return=None, direction="up").to_csv(tmp_path / "up.csv", index=False)
    refused(str(tmp_path / "up.csv"), "row 2: direction 'up' is not one of")
    dup.assign(horizon="next_year").to_csv(tmp_path / "horizon.csv", index=False)
    refused(str(tmp_path / "horizon.csv"), "horizon 'next_year' is unknown")
    dup.drop(columns="expected_return").to_csv(tmp_path / "cols.csv", index=False)
    refused(str(tmp_path / "cols.csv"), "missing column\\(s\\) expected_return or direction")
    # Past the cut-off (the next session's open): refused, or kept as a replay with `late`.
    late_at = cutoff(day) + dt.timedelta(seconds=1)
    refused(_file(tmp_path, day, ok), "closed to live submissions at 2023-06-02 09:30 New York", at=late_at)
    assert _count(engine) == 0
    res = submit(engine, settings, "desk", _file(tmp_path, day, ok), late=True, at=late_at)
    assert res.mode == "replay" and res.rows_written == 1


def test_cutoff_setting_moves_it_earlier(monkeypatch):
    monkeypatch.setenv("LDTM_SUBMISSION_CUTOFF_MIN", "90")
    assert cutoff(dt.date(2023, 6, 1)) == session_close(dt.date(2023, 6, 1)).replace(
        hour=12, minute=0
    ) + dt.timedelta(days=1)


def test_unpublished_until_promoted_then_published_and_replaced_when_missing(store, tmp_path):
    """A planted edge (the next-day sign known) is shown on its live record and promoted; the LSTM champion
    it replaces publishes on the evening its submission is missing, and never beside a submitted row."""
    engine, settings, prices = store
    lstm = make_model(engine, settings, "AAA", trained_on=dt.date(2023, 1, 31))
    registry.promote(engine, lstm, "test champion", settings)
    lstm_b = make_model(engine, settings, "BBB", trained_on=dt.date(2023, 1, 31))
    registry.promote(engine, lstm_b, "test champion", settings)
    close = prices.pivot(index="date", columns="ticker", values="close")
    days = sessions_between(dt.date(2023, 3, 1), dt.date(2023, 6, 30))
    for day in days:
        nxt = close.index[close.index.get_loc(pd.Timestamp(day)) + 1]
        edge = {t: 0.01 * np.sign(close.at[nxt, t] - close.at[pd.Timestamp(day), t]) for t in TICKERS}
        submit(engine, settings, "desk", _file(tmp_path, day, edge), at=_evening(day))
    # The champion published on a few of those evenings: its rows are the published ones, not the desk's.
    for day in days[-3:]:
        predict(engine, settings, day, ["AAA"])
    fillback(engine)
    with engine.connect() as conn:
        view = conn.execute(
            text("SELECT model_version FROM accuracy_30d_by_model_with_in_sample_and_ungated")
        ).all()
    assert all(not v.model_version.startswith("cand-") or v.model_version == f"cand-{lstm}" for v in view)
    verdict = judge.judge(engine, "desk")
    # Shown on every ticker; AAA's champion published on 3 of its evenings: too few to show it beaten.
    assert verdict.shown == TICKERS and verdict.promotable == ["BBB", "CCC"], verdict.table
    assert verdict.table.loc["AAA", "champion_n"] == 3 and "among 3 tickers" in verdict.detectable
    done = judge.promote(engine, "desk")
    assert sorted(p.ticker for p in done) == ["BBB", "CCC"]
    assert registry.active_model(engine, "BBB").recipe == registry.EXTERNAL
    assert registry.active_model(engine, "AAA").id == lstm
    # An evening with its submission: the submitted row publishes and the LSTM writes nothing for BBB.
    day = dt.date(2023, 7, 3)
    submit(engine, settings, "desk", _file(tmp_path, day, {"BBB": 0.01}), at=_evening(day))
    res = predict(engine, settings, day, ["BBB"])
    assert res.submitted == {"BBB": registry.active_model(engine, "BBB").version} and res.rows_written == 0
    with engine.connect() as conn:
        row = conn.execute(select(snapshots).where(snapshots.c.run_date == day)).one()
    assert row.model_status == "active"
    # An evening without: the previous champion publishes, and the evening says why.
    day = dt.date(2023, 7, 5)
    res = predict(engine, settings, day, ["BBB"])
    assert res.rows_written == 1 and "has no submission for 2023-07-05" in res.submission_missing["BBB"]
    with engine.connect() as conn:
        row = conn.execute(select(snapshots).where(snapshots.c.run_date == day)).one()
    assert row.model_id == lstm_b
    assert verify(engine).ok
    # Promoted, its published rows are in decay and in the signals like any champion's.
    from ldtm_core.accountability.decay.decay import DecaySettings, check
    from ldtm_core.accountability.signals.rows import RowChoice, load_rows

    fillback(engine)
    report = check(engine, ["BBB", "CCC"], DecaySettings.from_env())
    watched = {t.ticker: t for t in report.tickers}
    desk = registry.active_model(engine, "CCC")
    assert set(watched) == {"BBB", "CCC"} and watched["CCC"].model_id == desk.id
    # BBB's published record holds its 2023-07-03 submitted row; no backtest promised anything, so no chart,
    # and the report says where a submitted model's record is judged instead, and that its inputs are unknown.
    bbb = watched["BBB"]
    assert bbb.n >= 1 and "ldtm models judge" in bbb.reason and "does not know its inputs" in bbb.drift.reason
    rows = load_rows(engine, RowChoice(mode="live")).rows
    bbb_rows = rows[(rows["ticker"] == "BBB") & (rows["run_date"] == pd.Timestamp(2023, 7, 3))]
    assert bbb_rows["model_version"].tolist() == [
        registry.active_model(engine, "BBB").version
    ]  # its submitted row


def test_a_coin_flip_submitter_is_not_promoted(store, tmp_path):
    engine, settings, _ = store
    rng = np.random.default_rng(3)
    for day in sessions_between(dt.date(2023, 3, 1), dt.date(2023, 6, 30)):
        coin = {t: float(rng.choice([-0.01, 0.01])) for t in TICKERS}
        submit(engine, settings, "desk", _file(tmp_path, day, coin), at=_evening(day))
    fillback(engine)
    verdict = judge.judge(engine, "desk")
    assert verdict.table["n"].min() > 70 and verdict.promotable == []
    assert judge.promote(engine, "desk") == []


def test_receipts_cover_submissions_and_the_export_verifies(store, tmp_path, monkeypatch):
    from ldtm_core.accountability.ledger import receipts as rc
    from ldtm_core.accountability.ledger.record_export import export_record
    from ldtm_core.accountability.ledger.record_verify import verify_record

    engine, settings, _ = store
    private, public = tmp_path / "keys" / "r.pem", tmp_path / "keys" / "r.pub"
    rc.keygen(private, public)
    monkeypatch.setenv(rc.DIR_ENV, str(tmp_path / "receipts"))
    monkeypatch.setenv(rc.KEY_ENV, str(private))
    for day in (dt.date(2023, 6, 1), dt.date(2023, 6, 2)):
        # The receipt is signed on arrival: the simulated evening's clock, not today's.
        stamp = _evening(day).astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        monkeypatch.setattr(rc, "_now", lambda stamp=stamp: stamp)
        res = submit(
            engine, settings, "desk", _file(tmp_path, day, {"AAA": 0.01, "BBB": -0.01}), at=_evening(day)
        )
        assert res.receipt is not None
    fillback(engine)
    export_record(engine, tmp_path / "export")
    report = verify_record(tmp_path / "export", tmp_path / "receipts", rc.load_public_key(public))
    assert report.ok, report.findings
    assert report.rows == report.covered == 4 and report.receipts == 2
    # A late submission is a replay: covered, and counted apart as proving no forecast.
    day = dt.date(2023, 6, 5)
    submit(
        engine,
        settings,
        "desk",
        _file(tmp_path, day, {"AAA": 0.01}),
        late=True,
        at=_evening(day) + dt.timedelta(days=2),
    )
    fillback(engine)
    export_record(engine, tmp_path / "export2")
    report = verify_record(tmp_path / "export2", tmp_path / "receipts", rc.load_public_key(public))
    assert report.ok and (report.rows, report.covered, report.replay) == (5, 5, 1)


def test_a_file_of_several_evenings_is_counted_and_chained_whole(store, tmp_path):
    """Rows of several run dates in one file, one of them already recorded between two new ones: every new
    row is written and counted, the recorded one left alone, and each ticker's chain stays unbroken."""
    engine, settings, _ = store
    days = [dt.date(2023, 6, 1), dt.date(2023, 6, 2), dt.date(2023, 6, 5)]
    late = _evening(days[-1]) + dt.timedelta(days=3)
    submit(
        engine,
        settings,
        "desk",
        _file(tmp_path, days[1], {"AAA": 0.01, "BBB": 0.02}, name="mid.csv"),
        late=True,
        at=late,
    )
    frames = [pd.read_csv(_file(tmp_path, d, {"AAA": 0.01, "BBB": 0.02}, name=f"{d}.csv")) for d in days]
    pd.concat(frames).to_csv(tmp_path / "three.csv", index=False)
    res = submit(engine, settings, "desk", str(tmp_path / "three.csv"), late=True, at=late)
    assert (res.rows_written, res.rows_existing) == (4, 2)
    assert _count(engine) == 6
    assert verify(engine).ok


@pytest.mark.parametrize("backend_rule", ["sql", "python"])
def test_direction_only_forecasts_are_scored_by_their_direction_and_verify(
    store, tmp_path, monkeypatch, backend_rule
):
    """A direction-only file (next-day direction, no return, the other horizons left out) records NULL
    prices and the direction given; fillback scores the next-day call by that direction (in SQL, or per row
    where a corporate action rebases the answer), leaves every price error NULL, and the audit, the export's
    verifier and the judge agree. A return and a direction on one horizon still must agree."""
    from ldtm_core.accountability.ledger import receipts as rc
    from ldtm_core.accountability.ledger.record_export import export_record
    from ldtm_core.accountability.ledger.record_verify import verify_record

    engine, settings, prices = store
    if backend_rule == "python":  # a recorded action inside the horizons sends AAA's fill down the row path
        from ldtm_core.data.corporate_actions import Action, record_actions

        with engine.begin() as conn:  # factor 1: the answers stay the closes
            record_actions(conn, [Action("AAA", dt.date(2023, 6, 2), 1.0, "dividend", "test")])
    private, public = tmp_path / "keys" / "r.pem", tmp_path / "keys" / "r.pub"
    rc.keygen(private, public)
    monkeypatch.setenv(rc.DIR_ENV, str(tmp_path / "receipts"))
    monkeypatch.setenv(rc.KEY_ENV, str(private))
    days = [dt.date(2023, 6, 1), dt.date(2023, 6, 2), dt.date(2023, 6, 5)]
    said = {"AAA": "bullish", "BBB": "bearish", "CCC": "neutral"}
    for day in days:
        stamp = _evening(day).astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        monkeypatch.setattr(rc, "_now", lambda stamp=stamp: stamp)
        rows = [{"ticker": t, "run_date": day.isoformat(), "horizon": HORIZONS[0].name, "direction": d}
                for t, d in said.items()]  # fmt: skip
        pd.DataFrame(rows).to_csv(tmp_path / f"{day}.csv", index=False)
        res = submit(engine, settings, "desk", str(tmp_path / f"{day}.csv"), at=_evening(day))
        assert res.rows_written == 3 and res.receipt is not None
    fillback(engine)
    with engine.connect() as conn:
        got = pd.DataFrame(conn.execute(select(snapshots)).mappings().all())
    assert got[[h.col("pred") for h in HORIZONS]].isna().all().all()
    assert got[[h.col("pct_error") for h in HORIZONS]].isna().all().all()
    assert dict(zip(got["ticker"], got["direction_pred"], strict=False)) == said
    close = prices.set_index(["ticker", "date"])["close"]
    for r in got.itertuples():
        rdc, actual = r.run_date_close, r.next_day_actual
        assert actual == pytest.approx(close[(r.ticker, pd.Timestamp(r.next_day_date))])
        want = (
            None
            if actual == rdc
            else {"bullish": actual > rdc, "bearish": actual < rdc, "neutral": False}[r.direction_pred]
        )
        assert (None if pd.isna(r.next_day_direction_correct) else bool(r.next_day_direction_correct)) == want
    if backend_rule == "python":  # a split recorded after the fill: the re-fill logs no price error
        with engine.begin() as conn:
            record_actions(conn, [Action("BBB", dt.date(2023, 6, 2), 0.5, "split", "late feed")])
        assert len(refill(engine, automatic=True).refilled) == len(HORIZONS)  # BBB's 2023-06-01 row
        with engine.connect() as conn:
            logged = conn.execute(select(fill_revisions)).all()
            bbb = conn.execute(select(snapshots).where(snapshots.c.ticker == "BBB")).all()
        assert len(logged) == len(HORIZONS) and all(
            r.new_pct_error is None and r.ticker == "BBB" for r in logged
        )
        first = min(bbb, key=lambda r: r.run_date)
        assert first.next_day_actual == pytest.approx(2 * close[("BBB", pd.Timestamp(first.next_day_date))])
        assert first.next_day_direction_correct == (first.next_day_actual < first.run_date_close)
    assert verify(engine).ok
    export_record(engine, tmp_path / "export")
    report = verify_record(tmp_path / "export", tmp_path / "receipts", rc.load_public_key(public))
    assert report.ok and report.rows == report.covered == 9, report.findings
    table = judge.judge(engine, "desk").table
    assert (
        table.loc["CCC", "hits"] == 0 and table["n"].sum() == got["next_day_direction_correct"].notna().sum()
    )


def test_a_forged_arrival_time_is_caught_by_the_receipt(store, tmp_path, monkeypatch):
    """An attacker who can call submit with a false clock (or write the row as the app role) records a
    'live' forecast after its answer is known: the receipt, signed when it really arrived, is after the
    target's close, and the outside verifier names the row late."""
    from ldtm_core.accountability.ledger import receipts as rc
    from ldtm_core.accountability.ledger.record_export import export_record
    from ldtm_core.accountability.ledger.record_verify import verify_record

    engine, settings, _ = store
    rc.keygen(tmp_path / "k.pem", tmp_path / "k.pub")
    monkeypatch.setenv(rc.DIR_ENV, str(tmp_path / "receipts"))
    monkeypatch.setenv(rc.KEY_ENV, str(tmp_path / "k.pem"))
    day = dt.date(2023, 6, 1)
    res = submit(engine, settings, "desk", _file(tmp_path, day, {"AAA": 0.01}), at=_evening(day))  # forged
    assert res.mode == "live"
    fillback(engine)
    export_record(engine, tmp_path / "export")
    report = verify_record(tmp_path / "export", tmp_path / "receipts", rc.load_public_key(tmp_path / "k.pub"))
    assert [(f.kind, f.ticker, f.run_date) for f in report.findings] == [("late", "AAA", "2023-06-01")]


def test_the_leaderboard_names_submitted_models_and_shows_their_record(store, tmp_path):
    """`ldtm leaderboard` says which submitted models it leaves out (unpublished until promoted);
    `--submitted` prints each one's live record as `ldtm models judge` does."""
    from typer.testing import CliRunner

    from ldtm_core.cli import app

    engine, settings, _ = store
    for day in sessions_between(dt.date(2023, 6, 1), dt.date(2023, 6, 9)):
        submit(engine, settings, "desk", _file(tmp_path, day, {"AAA": 0.01, "BBB": -0.01}), at=_evening(day))
    fillback(engine)
    env = {"LDTM_DATABASE_URL": engine.url.render_as_string(hide_password=False), "LDTM_HOME": str(tmp_path)}
    plain = CliRunner().invoke(app, ["leaderboard"], env=env)
    assert plain.exit_code == 0, plain.output
    assert "submitted models (on this board only where promoted): desk" in " ".join(plain.output.split())
    shown = CliRunner().invoke(app, ["leaderboard", "--submitted"], env=env)
    text = " ".join(shown.output.split())
    assert shown.exit_code == 0 and "desk: live record" in text and "judged at e-BH level" in text, text
    n = {t: int(r["n"]) for t, r in judge.judge(engine, "desk").table.iterrows()}
    assert n["AAA"] > 0 and re.search(rf"AAA\s*\S\s*{n['AAA']}\s*\S", shown.output), shown.output
