"""The board's labels come from each ticker's whole published record (accountability.board.record).

A month never accumulates evidence, and read every evening its exact tests label coin-flip models; the
record's e-values grow with every evening an edge persists and stay valid however often they are read
(tests/scoring/test_evidence.py simulates both). Here, on the database: the record is the board's own
selection over every stored evening; a coin-flip model in a falling market beats always-up but is never
"shown to beat every baseline"; a persistent edge with a quiet last month is labelled; the sentences
say what the labels control and what the board could have shown.
"""

from __future__ import annotations

import datetime as dt

import numpy as np
import pandas as pd
import pytest
from sqlalchemy import insert
from test_leaderboard import _activate, _model, _row

from ldtm_core.accountability.board import record
from ldtm_core.accountability.board.leaderboard import leaderboard, verdict
from ldtm_core.db import lift_append_only
from ldtm_core.schema import snapshots
from ldtm_core.scoring.baselines import board_baselines, encode_calls
from ldtm_core.scoring.evidence import e_value, waits_to_show

START = dt.date(2023, 1, 2)
CALLS_UP = encode_calls({b.name: 1.0 for b in board_baselines()})


def _history(conn, ticker, ups, rights, **kw):
    """One filled evening per day from START: went up (`ups[i]`), the model right (`rights[i]`)."""
    mid = _model(conn, ticker)
    _activate(conn, mid)
    rows = []
    for i, (up, right) in enumerate(zip(ups, rights, strict=True)):
        actual = 101.0 if up else 99.0
        pred = actual if right else (99.0 if up else 101.0)
        # The close before was below: persistence says up every evening (so it is right with always-up),
        # and so does the trailing majority, recorded with the row as predict records it (chain version 3).
        rows.append(
            _row(ticker, mid, START + dt.timedelta(days=i), 100.0, 99.0, pred, actual, "live", 1, 1)
            | {"chain_version": 3, "baseline_calls": CALLS_UP}
            | kw
        )
    conn.execute(insert(snapshots), rows)
    return mid


def test_a_coin_in_a_falling_market_beats_always_up_but_is_never_shown_to_have_skill(engine):
    rng = np.random.default_rng(1)
    ups = rng.random(400) < 0.3  # a long fall: always-up is right 30 % of evenings
    rights = rng.random(400) < 0.5  # a coin-flip model
    with engine.begin() as conn:
        _history(conn, "FALL", ups, rights)
    got = leaderboard(engine).iloc[0]
    wins, losses = int((rights & ~ups).sum()), int((~rights & ups).sum())
    assert got["record_n"] == 400 and got["e_vs_always_up"] == pytest.approx(e_value(wins, losses))
    assert got["e_vs_coin"] == pytest.approx(e_value(rights.sum(), 400 - rights.sum()))
    assert bool(got["beats_always_up"])  # true: a coin beats always-up in a fall
    assert not bool(got["shown_skill"]) and got["e_skill"] == got["e_vs_coin"] < 20
    said = verdict(leaderboard(engine))
    assert said.startswith("No model is shown to beat every baseline, a coin included")
    assert "1 are shown to beat always-up (not all of them a coin)" in said
    answer = record.record_answer(leaderboard(engine))
    assert not answer.rejects and "No evidence yet" in answer.describe()


def test_a_model_that_follows_the_trailing_majority_is_never_shown_to_have_skill(engine):
    """A market that trends (the trailing majority right 65 % of evenings, up half the time and down half)
    and a model that only says what the trailing majority says: it beats a coin, always-up and persistence
    by far, but never the trailing majority it copies, so it is never shown to have skill of its own."""
    rng = np.random.default_rng(3)
    n = 600
    trend = [1.0 if i // 100 % 2 == 0 else -1.0 for i in range(n)]  # 100 evenings up-trend, 100 down, ...
    ups = [(c > 0) == (r < 0.65) for c, r in zip(trend, rng.random(n), strict=True)]
    with engine.begin() as conn:
        mid = _model(conn, "COPY")
        _activate(conn, mid)
        rows = []
        for i, (call, up) in enumerate(zip(trend, ups, strict=True)):
            actual = 101.0 if up else 99.0
            calls = {b.name: 1.0 for b in board_baselines()} | {"trend": call}
            rows.append(
                _row(
                    "COPY", mid, START + dt.timedelta(days=i), 100.0, 99.0, 100.0 + call, actual, "live", 1, 1
                )
                | {"chain_version": 3, "baseline_calls": encode_calls(calls)}
            )
        conn.execute(insert(snapshots), rows)
    got = leaderboard(engine).iloc[0]
    assert got["e_vs_coin"] > 1e6 and got["e_vs_always_up"] > 1e6 and bool(got["beats_always_up"])
    assert got["e_vs_trend"] == 1.0 and not bool(got["beats_trend"])  # no evening where the two disagree
    assert not bool(got["shown_skill"]) and got["e_skill"] == 1.0


def test_a_persistent_edge_is_labelled_from_its_record_while_its_month_is_quiet(engine):
    rng = np.random.default_rng(2)
    n = 500
    ups = rng.random(n) < 0.5
    rights = rng.random(n) < 0.7
    rights[-30:] = np.arange(30) % 2 == 0  # the last month: a coin's 50 %
    coins = {f"C{i}": rng.random(n) < 0.5 for i in range(5)}
    with engine.begin() as conn:
        _history(conn, "EDGE", ups, rights)
        for t, r in coins.items():
            _history(conn, t, ups, r)
        # A re-prediction of EDGE's last 20 evenings by a second model: never counted twice.
        mid = _model(conn, "EDGE")
        conn.execute(
            insert(snapshots),
            [
                _row("EDGE", mid, START + dt.timedelta(days=i), 100.0, 99.0, 99.0, 101.0, "live", 1, 1)
                | {"model_version": "v2", "prev_hash": f"v2{i}"}
                for i in range(n - 20, n)
            ],
        )
    board = leaderboard(engine).set_index("ticker")
    edge = board.loc["EDGE"]
    assert edge["q_vs_always_up"] > 0.05  # the month says nothing
    assert edge["record_n"] == n and edge["record_start"] == START
    assert edge["record_accuracy"] == pytest.approx(rights.mean())
    assert bool(edge["shown_skill"]) and bool(edge["beats_always_up"])
    assert not board.drop(index="EDGE")["shown_skill"].any()
    said = verdict(board.reset_index())
    assert said.startswith("1 of 6 models are shown to beat every baseline, a coin included")
    assert "): EDGE 6" in said and "over 500 evenings (e = " in said
    answer = record.record_answer(board.reset_index())
    assert answer.rejects and answer.shown == 1 and "Yes:" in answer.describe()
    # The per-model board keeps each version's own record.
    from ldtm_core.accountability.board.leaderboard import leaderboard_by_model

    by_model = leaderboard_by_model(engine).set_index(["ticker", "model_version"])
    assert by_model.loc[("EDGE", "v1"), "record_n"] == n and by_model.loc[("EDGE", "v2"), "record_n"] == 20


def test_in_sample_rows_are_out_of_the_record_unless_asked_and_then_said(engine):
    with engine.begin() as conn:
        _history(conn, "INS", [True, False] * 100, [True] * 200, in_sample=True)
    assert leaderboard(engine).empty or leaderboard(engine)["record_n"].sum() == 0
    shown = leaderboard(engine, include_in_sample=True)
    assert shown.iloc[0]["record_n"] == 200 and bool(shown.iloc[0]["shown_skill"])
    from ldtm_core.accountability.board.leaderboard import IN_SAMPLE_CAVEAT

    assert "in-sample rows included" in verdict(shown)
    assert "in-sample rows included" in record.record_answer(shown, IN_SAMPLE_CAVEAT).describe()


def test_the_rule_says_what_the_board_could_show():
    import pandas as pd

    board = pd.DataFrame({"record_n": [10, 0, 5]})
    rule = record.evidence_rule(board)
    assert "over the 2 tickers with a record" in rule
    median, share = waits_to_show(0.6, 2)
    assert f"60%: {share:.0%} (median ~{median:,.0f} evenings)" in rule


@pytest.mark.parametrize("by_model", [False, True])
@pytest.mark.parametrize("flags", [{}, {"include_in_sample": True}, {"include_ungated": True}])
def test_the_database_counts_the_record_as_the_rows_read_in_python_do(db_url, tmp_path, by_model, flags):
    """The record's counts come from one GROUP BY over the view's selection (cost: docs/performance.md);
    on a store with re-predictions, in-sample and ungated evenings, ties, shadow rows and a dated
    universe they equal the counts of every row read into Python with its recorded calls."""
    from sqlalchemy import update
    from test_board_bounded_reads import _store

    from ldtm_core.data.membership import Span, import_membership

    url = f"sqlite:///{tmp_path}/r.db" if db_url.startswith("sqlite") else db_url
    engine = _store(url, old=True)
    lift_append_only(engine)  # rewrites the record on purpose: SQLite's append-only triggers off
    with engine.begin() as conn:  # some shadow rows, never counted
        conn.execute(update(snapshots).where(snapshots.c.id % 17 == 0).values(model_status="shadow"))
    import_membership(engine, [Span("AAA", dt.date(2020, 1, 1)), Span("BBB", dt.date(2024, 9, 1))], "t")
    cols = ["ticker", "model_version"] if by_model else ["ticker"]
    for mode in ("all", "live", "replay"):
        fast = record.sql_figures(engine, mode, by_model=by_model, **flags)
        slow = record.python_figures(engine, ["AAA", "BBB", "GONE"], mode, by_model=by_model, **flags)
        fast = fast[slow.columns].sort_values(cols).reset_index(drop=True)
        slow = slow.sort_values(cols).reset_index(drop=True)
        assert len(slow) >= 2 and slow["record_n"].sum() > 150
        for b in board_baselines():  # each baseline has disagreements to count, the recorded trend too
            assert (slow[f"{b.name}_wins"] + slow[f"{b.name}_losses"]).sum() > 0, b.name
        pd.testing.assert_frame_equal(fast, slow, check_dtype=False)


def _closer(frame: pd.DataFrame) -> pd.DataFrame:
    """By hand, per row: 1 when the forecast landed closer to the answer than no change, -1 farther."""
    model = (frame["pred"].astype(float) - frame["actual"].astype(float)).abs()
    naive = (frame["close"].astype(float) - frame["actual"].astype(float)).abs()
    return frame.assign(closer=np.sign(naive - model))


def _weekly(rng, tickers, weeks, rate):
    """Five evenings a week sharing one next-Monday target; the model lands closer than no change on
    a target with probability rate[ticker] (the same answer for the week's five rows: they overlap)."""
    rows = []
    for t, r in zip(tickers, rate, strict=True):
        for w in range(weeks):
            monday = START + dt.timedelta(days=7 * (w + 1))
            actual = 100 + rng.normal()
            closer = rng.random() < r
            for d in range(5):
                close = 100.0
                pred = actual + (0.1 if closer else 5.0) * (1 if rng.random() < 0.5 else -1)
                if not closer:
                    close = actual + 0.1
                run = monday - dt.timedelta(days=7 - d)
                rows.append((t, run, monday, pred, actual, close))
    return pd.DataFrame(rows, columns=["ticker", "run_date", "target", "pred", "actual", "close"])


def test_a_week_answer_counts_each_target_once_and_finds_a_planted_edge():
    rng = np.random.default_rng(4)
    planted = record.horizon_answer(
        "next Monday", _closer(_weekly(rng, ["EDGE", "C1", "C2"], 150, [0.8, 0.5, 0.5]))
    )
    assert planted.targets == 450  # 3 tickers x 150 targets, not 5 overlapping rows each
    assert planted.rejects and planted.shown == 1 and "Yes" in planted.describe()
    assert planted.describe().startswith(
        "Next Monday: does any model land closer to the answer than no change"
    )


def test_week_answers_on_coin_flip_models_rarely_say_yes():
    """Under no skill (closer on half of the targets) read at the end of 3 years: false Yes <= alpha."""
    rng = np.random.default_rng(8)
    sims, yes = 150, 0
    for _ in range(sims):
        frame = _weekly(rng, [f"T{i}" for i in range(10)], 150, [0.5] * 10)
        yes += record.horizon_answer("next Monday", _closer(frame)).rejects
    assert yes / sims <= 0.05 + 2 * np.sqrt(0.05 * 0.95 / sims)


def test_the_cli_prints_the_record_answers_under_the_board(engine, ldtm_env):
    from typer.testing import CliRunner

    from ldtm_core.cli import app

    rng = np.random.default_rng(3)
    with engine.begin() as conn:
        _history(conn, "AAA", rng.random(60) < 0.5, rng.random(60) < 0.5)
    # The database's read of each horizon gives the answer the stored rows give by hand.
    with engine.connect() as conn:
        stored = pd.DataFrame(conn.execute(snapshots.select()).mappings().all())
    for h, got in zip(
        ("next_monday", "one_month"), record.horizon_answers(engine, ["AAA"], "all"), strict=True
    ):
        named = {
            f"{h}_date": "target",
            f"{h}_pred": "pred",
            f"{h}_actual": "actual",
            "run_date_close": "close",
        }
        frame = stored.rename(columns=named)[["ticker", "run_date", "target", "pred", "actual", "close"]]
        assert got == record.horizon_answer(got.horizon, _closer(frame)) and got.targets > 0
    short = " ".join(CliRunner().invoke(app, ["leaderboard"]).output.split())
    # The answers lead, one line each, the window's marked as a description; the method: --explain.
    first = short.index("Shown to beat every baseline, a coin included (whole record): not yet (e = ")
    assert first < short.index("Next Monday, closer than no change (whole record):") < short.index("┏")
    assert "30-day window (a description, not the label): best model vs its best baseline" in short
    assert "shown within five years" not in short and "--explain" in short
    out = " ".join(CliRunner().invoke(app, ["leaderboard", "--explain"]).output.split())
    assert (
        "Does any model beat every baseline, a coin included, on its whole published record (1 tickers" in out
    )
    assert "Next Monday: does any model land closer to the answer than no change" in out
    assert "One month: does any model land closer" in out
    assert (
        "A description of the month, not the label: the record's answer (anytime-valid, a coin among the "
        "baselines) is the test. In the 30-day window, does any model beat its best no-hindsight baseline"
        in out
    )
    assert "shown within five years (1,260 scored evenings) among 1 tickers" in out


def test_overlapping_month_targets_are_thinned_to_ones_known_before_the_next():
    runs = [START + dt.timedelta(days=i) for i in range(100)]
    frame = pd.DataFrame(
        {
            "ticker": "AAA",
            "run_date": runs,
            "target": [d + dt.timedelta(days=30) for d in runs],
            "pred": 101.0,
            "actual": 101.5,
            "close": 100.0,
        }
    )
    got = record.horizon_answer("one month", _closer(frame))
    assert got.targets == 4 and got.closer == 4  # runs 0, 30, 60, 90: each on or after the last target
