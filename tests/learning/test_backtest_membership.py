"""Issue 40: backtest folds read the dated universe (a fold tests a ticker only on evenings it was a
member), `ldtm backtest --end` keeps the folds before a replay window, and `evenings_seen_by_folds` says
which replayed evenings the folds had already seen."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pytest
from accountability_helpers import add_backtest
from sqlalchemy import insert, select
from test_backtest import CFG, stub_fit, world  # noqa: F401  (fixtures)
from typer.testing import CliRunner

from ldtm_core.cli import app
from ldtm_core.data.calendar import sessions_between
from ldtm_core.data.membership import Span, import_membership
from ldtm_core.learning import backtest as bt
from ldtm_core.learning.fold_evidence import evenings_seen_by_folds
from ldtm_core.schema import backtest_folds, gate_decisions

D = dt.date
LEFT = D(2023, 11, 15)  # AAPL leaves the universe mid-quarter (the prices go on: it is still traded)


def _stored(engine, backtest_id):
    with engine.connect() as conn:
        return conn.execute(
            select(backtest_folds)
            .where(backtest_folds.c.backtest_id == backtest_id)
            .order_by(backtest_folds.c.fold)
        ).all()


def test_a_fold_tests_only_evenings_on_which_the_ticker_was_a_member(engine, world, stub_fit):  # noqa: F811
    s, _, _ = world
    # No history: today's list applied to the past, the folds run to the newest completed quarter.
    free = bt.run_backtest(engine, s, "AAPL", CFG, folds=3)
    assert free.folds[-1].window.test_end > LEFT
    import_membership(engine, [Span("AAPL", D(2022, 1, 3), LEFT)], "history.txt")
    res = bt.run_backtest(engine, s, "AAPL", CFG, folds=3)
    windows = [f.window for f in res.folds]
    assert all(w.test_end <= LEFT for w in windows)
    # The quarter it left in is a fold up to its last member evening; the two before are whole quarters.
    assert (windows[-1].test_start, windows[-1].test_end) == (D(2023, 10, 2), LEFT)
    assert [w.test_start for w in windows[:2]] == [D(2023, 4, 3), D(2023, 7, 3)]
    assert res.folds[-1].scores.n == len(sessions_between(D(2023, 10, 2), LEFT))  # ties included
    rows = _stored(engine, res.backtest_id)
    assert [r.test_end for r in rows] == [w.test_end for w in windows] and max(
        r.test_end for r in rows
    ) <= LEFT


def test_a_late_joiner_is_tested_from_its_first_member_evening(engine, world, stub_fit):  # noqa: F811
    s, _, _ = world
    import_membership(engine, [Span("AAPL", D(2023, 8, 15))], "history.txt")
    res = bt.run_backtest(engine, s, "AAPL", CFG, folds=3)
    first = res.folds[0].window
    assert first.test_start == D(2023, 8, 15) and first.cutoff == D(2023, 8, 14)
    assert [f.window.test_start for f in res.folds[1:]] == [D(2023, 10, 2), D(2024, 1, 2)]
    with pytest.raises(Exception, match="as a member of the universe"):
        bt.run_backtest(engine, s, "AAPL", CFG, folds=4)


def test_fold_spans_skip_a_quarter_without_member_evenings(engine, world):  # noqa: F811
    from ldtm_core.data.feature_store import prices_and_features
    from ldtm_core.data.samples import build_samples

    prices, feats = prices_and_features(engine, "AAPL", features=CFG.features)
    samples = build_samples(prices, CFG.window, features=feats.frame, names=CFG.features)
    q3 = (samples.dates >= np.datetime64("2023-07-01")) & (samples.dates <= np.datetime64("2023-09-30"))
    _, spans = bt.fold_spans(samples, 3, None, "AAPL", ~q3)
    starts = [str(samples.dates[sp.test_idx[0]])[:10] for sp in spans]
    assert starts == ["2023-04-03", "2023-10-02", "2024-01-02"]
    assert bt.fold_spans(samples, 3, None, "AAPL", None)[1][0].test_idx.tolist() == (
        bt.fold_spans(samples, 3, None, "AAPL")[1][0].test_idx.tolist()
    )


def test_cli_backtest_end_keeps_the_folds_before_a_replay_window(engine, world, ldtm_env, stub_fit):  # noqa: F811
    out = CliRunner().invoke(app, ["backtest", "--ticker", "AAPL", "--folds", "2", "--end", "2023-12-29"])
    assert out.exit_code == 0, out.output
    assert "prices 2022-01-03..2023-12-29" in " ".join(out.output.split())
    with engine.connect() as conn:
        rows = conn.execute(select(backtest_folds.c.test_end, backtest_folds.c.data_end)).all()
    assert rows and all(r.test_end <= D(2023, 12, 29) and r.data_end == D(2023, 12, 29) for r in rows)
    bad = CliRunner().invoke(app, ["backtest", "--ticker", "AAPL", "--end", "soon"])
    assert bad.exit_code == 2 and "--end" in bad.stderr


def test_evenings_seen_by_folds_counts_the_replayed_evenings_the_gate_judged(engine, world):  # noqa: F811
    _, _, mid = world
    judged = add_backtest(engine, mid, [(40, 0.6, 0.5, 1.0, 0)])
    other = add_backtest(engine, mid, [(40, 0.6, 0.5, 1.0, 0)])
    with engine.begin() as conn:
        conn.execute(
            backtest_folds.update()
            .where(backtest_folds.c.backtest_id == judged)
            .values(
                train_start=D(2023, 1, 3),
                train_end=D(2024, 3, 28),
                test_start=D(2024, 4, 1),
                test_end=D(2024, 4, 30),
            )
        )
        conn.execute(
            backtest_folds.update()
            .where(backtest_folds.c.backtest_id == other)
            .values(test_start=D(2024, 5, 1), test_end=D(2024, 5, 31))
        )
        conn.execute(
            insert(gate_decisions),
            {
                "backtest_id": judged,
                "model_id": mid,
                "ticker": "AAPL",
                "passed": True,
                "decided_at": dt.datetime.now(dt.UTC),
            },
        )
    seen = evenings_seen_by_folds(engine, ["AAPL", "NVDA"], D(2024, 3, 25), D(2024, 5, 10))
    april = sessions_between(D(2024, 4, 1), D(2024, 4, 30))
    assert seen.tested == {"AAPL": tuple(april)} and seen.n_tested == len(april)
    assert seen.trained == {"AAPL": tuple(sessions_between(D(2024, 3, 25), D(2024, 3, 28)))}
    assert seen.backtests == (judged,) and seen.sessions == len(
        sessions_between(D(2024, 3, 25), D(2024, 5, 10))
    )
    assert "were test evenings of the folds the gate judged" in seen.note(tickers=2)
    every = evenings_seen_by_folds(engine, ["AAPL"], D(2024, 3, 25), D(2024, 5, 10), judged_only=False)
    assert every.n_tested == len(april) + len(sessions_between(D(2024, 5, 1), D(2024, 5, 10)))
    after = evenings_seen_by_folds(engine, ["AAPL"], D(2024, 6, 3), D(2024, 6, 28))
    assert after.n_tested == after.n_trained == 0 and after.note().startswith("out of fold")
