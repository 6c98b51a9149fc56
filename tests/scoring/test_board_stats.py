"""The board at the scale it is read (issue 27): BH labels over the whole board, the SPA universe answer,
distinct target dates, and the reason a ticker has no production model.

The simulations run the board's own functions (board_stats.board_from_rows / universe_test: what
`leaderboard` and `universe` compute from the database, checked equal below) on universes of models
without skill (coin-flip directions, independent of the future) and with a planted edge.
"""

from __future__ import annotations

import datetime as dt
import time

import numpy as np
import pandas as pd
import pytest
from accountability_helpers import add_backtest, make_model, make_settings
from sqlalchemy import insert
from statsmodels.stats.multitest import multipletests
from test_leaderboard import _activate, _model, _row
from typer.testing import CliRunner

from ldtm_core.accountability.board.leaderboard import leaderboard, universe
from ldtm_core.accountability.board.no_champion import without_champion
from ldtm_core.accountability.gate.gate import run_gate
from ldtm_core.cli import app
from ldtm_core.schema import snapshots
from ldtm_core.scoring import baselines, board_stats
from ldtm_core.scoring.board_stats import HISTORY_DAYS
from ldtm_core.scoring.evidence import e_bh, e_value

FIRST = dt.date(2024, 1, 1)


def _universe(rng, evenings=21, tickers=103, up_rate=0.5, edge=(0, 0.5), history=0, market=0.5):
    """Rows of one board: per ticker and evening, whether the model was right, the price rose, and
    persistence and the trailing majority were right. Each ticker follows a common market move with probability `market` (tickers
    move together, as real ones do), else its own; the model is right with probability 0.5, or
    `edge[1]` for the first `edge[0]` tickers. Returns (rows in the window, rows before it, keys)."""
    total = evenings + history + 1
    mkt = rng.random(total) < up_rate
    up = np.where(rng.random((total, tickers)) < market, mkt[:, None], rng.random((total, tickers)) < up_rate)
    today, tomorrow = up[:-1], up[1:]
    p = np.full(tickers, 0.5)
    p[: edge[0]] = edge[1]
    right = rng.random((total - 1, tickers)) < p
    # The trailing majority's call on each run date, from the closes these moves make (scoring.baselines).
    close = np.cumprod(np.where(up, 1.01, 0.99), axis=0)
    prev = np.vstack([np.full((1, tickers), np.nan), close[:-1]])
    rows_at = np.arange(total - 1)
    trend_up = np.column_stack(
        [baselines.trailing_majority(close[:, j], prev[:, j], rows_at) > 0 for j in range(tickers)]
    )
    days = [FIRST + dt.timedelta(days=i) for i in range(total - 1)]
    keys = [f"T{i:03d}" for i in range(tickers)]
    rows = pd.DataFrame(
        {
            "key": np.tile(keys, total - 1),
            "run_date": np.repeat(days, tickers),
            "model_right": right.ravel(),
            "up": tomorrow.ravel(),
            "persist_right": (today == tomorrow).ravel(),
            "has_prev": True,
            "trend_right": (trend_up == tomorrow).ravel(),
        }
    )
    cut = days[history]
    return rows[rows["run_date"] >= cut], rows[rows["run_date"] < cut], keys


def test_q_values_are_statsmodels_bh_over_the_tested_rows_only():
    p = np.array([0.001, 0.02, np.nan, 0.04, 0.5])
    q = board_stats.bh_qvalues(p)
    assert np.isnan(q[2])
    assert q[~np.isnan(p)] == pytest.approx(multipletests(p[~np.isnan(p)], method="fdr_bh")[1])
    # A stale row (n = 0) is not part of the family: adding one changes no q.
    board = pd.DataFrame(
        {
            "n": [21, 21, 0],
            "stale": [False, False, True],
            "direction_accuracy": [0.9, 0.6, np.nan],
            "always_up_accuracy": [0.5, 0.5, np.nan],
            "persistence_accuracy": [0.5, 0.5, np.nan],
            "skill_p_value": [0.001, 0.04, 1.0],
            "persistence_p_value": [0.002, 0.3, 1.0],
            # No recorded trailing-majority call on these rows: no test, not in the family.
            "trend_accuracy": [np.nan] * 3,
            "trend_p_value": [np.nan] * 3,
        }
    )
    got = board_stats.label_board(board)
    assert got["q_vs_always_up"].tolist()[:2] == pytest.approx(
        multipletests([0.001, 0.04, 0.002, 0.3], method="fdr_bh")[1][:2]
    )
    assert np.isnan(got["q_vs_always_up"].iloc[2]) and not got["beats_always_up"].iloc[2]
    assert got["beats_always_up"].tolist() == [True, False, False]  # p 0.04 alone, q 0.053: no label


def test_a_null_universe_shows_beats_on_at_most_5_percent_of_boards():
    """103 coin-flip models, 21 evenings a board: the old per-ticker p <= 0.05 labelled some ticker on
    nearly every board; BH over the board's 309 tests labels one on at most 5 %."""
    rng = np.random.default_rng(20271)
    boards, labelled, old_rule = 100, 0, 0
    for i in range(boards):
        rows, _, _ = _universe(rng, up_rate=(0.5, 0.53)[i % 2])
        b = board_stats.board_from_rows(rows)
        labelled += bool((b["beats_always_up"] | b["beats_persistence"]).any())
        ahead = b["direction_accuracy"] > b["always_up_accuracy"]
        old_rule += bool(
            ((b["skill_p_value"] <= 0.05) & ahead).any() or (b["persistence_p_value"] <= 0.05).any()
        )
    assert labelled / boards <= 0.05
    assert old_rule / boards >= 0.8  # what the board showed before issue 27


def test_a_planted_edge_is_labelled_and_the_labels_are_mostly_true():
    """10 of 103 tickers right 70 % of the time. On the board's own ~21 evenings that edge is nearly
    invisible after the search (docs/operations.md gives the power); on a 120-evening record the labels
    find it and at most a few percent of them are false (BH's promise)."""
    rng = np.random.default_rng(7)
    found, labels, false = 0, 0, 0
    for _ in range(20):
        rows, _, keys = _universe(rng, evenings=120, edge=(10, 0.7))
        b = board_stats.board_from_rows(rows)
        hit = (b["beats_always_up"] | b["beats_persistence"]).to_numpy()
        found += hit[:10].sum()
        labels += hit.sum()
        false += hit[10:].sum()
    assert found / (20 * 10) >= 0.5
    assert false / labels <= 0.1


def test_spa_holds_its_size_on_a_null_universe_and_finds_a_planted_edge():
    rng = np.random.default_rng(11)
    null = [
        board_stats.universe_test(*_universe(rng, history=60, up_rate=(0.5, 0.53)[i % 2])).p_value
        for i in range(40)
    ]
    assert np.mean(np.array(null) <= 0.05) <= 0.1  # 4 of 40 at most (measured 3-4 % on 200 boards)
    planted = [
        board_stats.universe_test(*_universe(rng, history=60, edge=(10, 0.8))).p_value for _ in range(30)
    ]
    assert np.mean(np.array(planted) <= 0.05) >= 0.3  # measured 53 % on 100 boards


def test_spa_is_deterministic_and_fast_on_a_103_ticker_board():
    rows, before, keys = _universe(np.random.default_rng(1), history=60)
    start = time.perf_counter()
    first = board_stats.universe_test(rows, before, keys)
    took = time.perf_counter() - start
    assert board_stats.universe_test(rows, before, keys) == first
    assert took < 2.0, took  # two shared cores; ~0.2 s unloaded
    assert first.tickers == 103 and first.evenings == 21
    assert sum(first.baselines.values()) == 103
    assert "after the search over the 103 tickers" in first.describe()
    # It names the test it is: arch's SPA with its `upper` p (reality-check recentring), not Hansen's.
    assert "its `upper` p (White's reality check, not Hansen's consistent p)" in first.describe()


def test_loss_differentials_use_the_baseline_chosen_before_the_window():
    rows = pd.DataFrame(
        {
            "key": ["A", "A", "B", "B"],
            "run_date": [FIRST, FIRST + dt.timedelta(days=1)] * 2,
            "model_right": [True, False, True, True],
            "up": [False, False, True, True],
            "persist_right": [True, True, False, False],
            "has_prev": [True, True, True, False],
            "trend_right": [False, True, False, True],
        }
    )
    before = pd.DataFrame(  # A: persistence was better before the window; B: always-up
        {
            "key": ["A", "A", "B"],
            "up": [False, False, True],
            "persist_right": [True, True, False],
            "has_prev": True,
            "trend_right": False,  # the trailing majority was wrong on every evening before
        }
    )
    chosen = board_stats.best_baselines(before, ["A", "B", "C"])
    assert chosen == {"A": "persistence", "B": "always_up", "C": "always_up"}
    d = board_stats.loss_differentials(rows, chosen)
    # A vs persistence: (0 - 0), (1 - 0); B vs always-up: (0 - 0) twice; C has no rows: zeros.
    assert d.to_numpy().tolist() == [[0.0, 0.0, 0.0], [1.0, 0.0, 0.0]]


# --- the database: the board computes exactly what the pure functions do, on both databases ----------


def _board_rows(engine, spec, days=25):
    """spec: {ticker: P(model right)}; deterministic per ticker. Returns the rows as flags."""
    rng = np.random.default_rng(5)
    rows, flags = [], []
    with engine.begin() as conn:
        for t, p in spec.items():
            mid = _model(conn, t)
            _activate(conn, mid)
            moves = rng.random(days + 1) < 0.52
            close = np.cumprod(np.where(moves, 1.01, 0.99))
            prev_close = np.concatenate([[np.nan], close[:-1]])
            # The trailing majority as predict records it on each run date (chain version 3).
            trend = baselines.trailing_majority(close, prev_close, np.arange(days))
            for i in range(days):
                d = dt.date(2024, 5, 1) + dt.timedelta(days=i)
                went_up, was_up = bool(moves[i + 1]), bool(moves[i])
                right = bool(rng.random() < p)
                actual = 101.0 if went_up else 99.0
                pred = actual if right else (99.0 if went_up else 101.0)
                prev = 99.0 if was_up else 101.0
                calls = {"always_up": 1.0, "persistence": 1.0 if was_up else -1.0, "trend": trend[i]}
                rows.append(
                    _row(t, mid, d, 100.0, prev, pred, actual, "live", 1.0, 1.0)
                    | {"chain_version": 3, "baseline_calls": baselines.encode_calls(calls)}
                )
                flags.append(
                    {
                        "key": t,
                        "run_date": d,
                        "model_right": right,
                        "up": went_up,
                        "persist_right": went_up == was_up,
                        "has_prev": True,
                        "trend_right": (trend[i] > 0) == went_up,
                    }
                )
        conn.execute(insert(snapshots), rows)
    return pd.DataFrame(flags)


def test_the_database_board_labels_with_bh_and_answers_with_spa(engine):
    spec = {f"C{i:02d}": 0.5 for i in range(20)} | {"EDGE1": 1.0, "EDGE2": 1.0}
    flags = _board_rows(engine, spec, days=80)
    board = leaderboard(engine).set_index("ticker")
    start = board["window_start"].min()
    window = flags[flags["run_date"] >= start]
    expected = board_stats.board_from_rows(window).set_index("key")
    cols = [f"{w}_{b.name}" for b in baselines.board_baselines() for w in ("q_vs",)]
    for col in (*(b.column("p") for b in baselines.board_baselines()), *cols):
        assert board[col].sort_index().to_numpy() == pytest.approx(expected[col].sort_index().to_numpy()), col
    # The labels are the whole record's (80 evenings), e-BH over the board's e-values.
    whole = board_stats.baseline_figures(flags, "key").set_index("key").loc[board.index]
    e_up = e_value(whole["model_only"], whole["up_only"])
    assert board["e_vs_always_up"].to_numpy() == pytest.approx(e_up)
    assert board["e_vs_coin"].to_numpy() == pytest.approx(e_value(whole["hits"], whole["n"] - whole["hits"]))
    family = np.concatenate([e_up, board["e_vs_persistence"], board["e_vs_trend"]])
    e_trend = e_value(whole["trend_model_only"], whole["trend_only"])
    assert board["e_vs_trend"].to_numpy() == pytest.approx(e_trend) and (whole["trend_n"] == 80).all()
    assert board["beats_always_up"].tolist() == e_bh(family)[: len(board)].tolist()
    assert bool(board.loc["EDGE1", "beats_always_up"]) and bool(board.loc["EDGE2", "beats_persistence"])
    assert sorted(board.index[board["shown_skill"]]) == ["EDGE1", "EDGE2"]
    answer = universe(engine, leaderboard(engine))
    before = flags[
        (flags["run_date"] < start) & (flags["run_date"] >= start - dt.timedelta(days=HISTORY_DAYS))
    ]
    assert answer == board_stats.universe_test(window, before, sorted(spec))
    assert answer.rejects and answer.best in ("EDGE1", "EDGE2")
    assert answer.tickers == 22 and answer.evenings == len(window["run_date"].unique())


def test_each_horizon_says_on_how_many_distinct_target_dates_it_stands(engine):
    """Two weeks of evenings: ten next-Monday rows stand on two target dates, ten one-month rows on ten."""
    monday = dt.date(2024, 3, 4)
    evenings = [monday + dt.timedelta(days=w * 7 + d) for w in range(2) for d in range(5)]
    rows = []
    with engine.begin() as conn:
        mid = _model(conn, "WEEK")
        _activate(conn, mid)
        for d in evenings:
            r = _row("WEEK", mid, d, 100.0, 99.0, 101.0, 102.0, "live", 1.0, 2.0)
            r["next_monday_date"] = d + dt.timedelta(days=7 - d.weekday())
            r["one_month_date"] = d + dt.timedelta(days=30)
            rows.append(r | {"in_sample": False})
        # An in-sample row (its own target dates) is off the default board and off the counts.
        extra = _row("WEEK", mid, monday + dt.timedelta(days=5), 100.0, 99.0, 101.0, 102.0, "live", 1.0, 2.0)
        extra |= {
            "in_sample": True,
            "next_monday_date": dt.date(2024, 3, 25),
            "one_month_date": dt.date(2024, 4, 8),
        }
        rows.append(extra)
        conn.execute(insert(snapshots), rows)
    got = leaderboard(engine).iloc[0]
    assert (got["next_monday_n"], got["next_monday_dates"]) == (10, 2)
    assert (got["one_month_n"], got["one_month_dates"]) == (10, 10)
    with_in_sample = leaderboard(engine, include_in_sample=True).iloc[0]
    assert (with_in_sample["next_monday_n"], with_in_sample["next_monday_dates"]) == (11, 3)


def test_a_ticker_refused_by_the_gate_is_named_with_its_reason(ldtm_env, engine, tmp_path):
    settings = make_settings(tmp_path, ldtm_env["url"])
    mid = make_model(engine, settings, "NOPE")
    add_backtest(engine, mid, [(63, 0.40, 0.5, 1.0, 0, 10, 20)] * 3, ticker="NOPE")
    assert not run_gate(engine, settings, "NOPE").passed
    (row,) = without_champion(engine)
    assert row.ticker == "NOPE" and row.model_id == mid and row.decision == "fail"
    assert "direction_accuracy = 40.00% (needs >= 52.00%)" in row.reason
    out = " ".join(CliRunner().invoke(app, ["leaderboard"]).output.split())
    assert "No production model" in out and "NOPE" in out and "direction_accuracy = 40.00%" in out


def test_the_verdict_counts_the_tests_of_the_baselines_the_board_scores(monkeypatch):
    """The BH family is every (ticker, board baseline) test (scoring.baselines' registry), a baseline with
    no recorded call on a row's evenings having none there: the verdict's count follows the registry and
    the rows, not a number written beside it (issue 39)."""
    import dataclasses

    from ldtm_core.accountability.board.leaderboard import verdict
    from ldtm_core.scoring import baselines

    board = pd.DataFrame(
        {
            "ticker": ["AAA", "BBB", "CCC"],
            "stale": [False, False, False],
            "n": [20, 20, 20],
            "direction_accuracy": [0.4, 0.4, 0.4],
            "always_up_accuracy": [0.6, 0.6, 0.6],
            "beats_always_up": [False, False, False],
            "skill_p_value": [0.9, 0.9, 0.9],
            "persistence_p_value": [0.5, 0.5, 0.5],
            # CCC's window rows predate the recorded trailing majority: no call, no test.
            "trend_p_value": [0.5, 0.5, np.nan],
        }
    )
    assert "the window's 8 tests" in verdict(board)
    assert "this board's window family: 8 tests over 3 scored rows x 3 baselines" in board_stats.label_rule(
        board
    )
    trend = dataclasses.replace(baselines.by_name("trend"), on_board=False)
    monkeypatch.setattr(baselines, "REGISTRY", (*baselines.REGISTRY[:2], trend))
    assert "the window's 6 tests" in verdict(board)
