"""Adding a baseline is one registry entry (issue 39 item 1): a 5-day momentum baseline, registered here
by monkeypatching `scoring.baselines.REGISTRY` and nothing else, reaches the backtest's fold rows, the
gate report (words, JSON, Markdown, the CLI's table), the board's columns, its BH family and the
family size shown beside the q-values, the CLI's and the dashboard's columns."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from statsmodels.stats.multitest import multipletests

from ldtm_core.scoring import baselines, board_stats
from ldtm_core.scoring.baselines import Baseline, Paired

SESSIONS = 5


def _momentum(close: np.ndarray, prev_close: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """The sign of the move over the last 5 sessions (NaN: fewer than 5 sessions before the row)."""
    close = np.asarray(close, float)
    rows = np.asarray(rows, dtype=int)
    back = close[np.maximum(rows - SESSIONS, 0)]
    return np.where(rows >= SESSIONS, np.sign(close[rows] - back), np.nan)


MOMENTUM = Baseline(
    "momentum_5",
    "5-day momentum",
    "mom5",
    _momentum,
    "the sign of the last 5 sessions' move",
    sessions=SESSIONS + 1,
    on_board=True,
)


@pytest.fixture
def momentum(monkeypatch):
    monkeypatch.setattr(baselines, "REGISTRY", (*baselines.REGISTRY, MOMENTUM))
    return MOMENTUM


def _rows(rng, keys=("AAA", "BBB", "CCC", "DDD"), evenings=40) -> pd.DataFrame:
    n = len(keys) * evenings
    out = pd.DataFrame(
        {
            "key": np.repeat(keys, evenings),
            "run_date": np.tile(np.arange(evenings), len(keys)),
            "model_right": rng.random(n) < 0.6,
        }
    )
    for b in ("always_up", "persistence", "trend", "momentum_5"):
        out[f"{b}_right"] = rng.random(n) < 0.5
        out[f"{b}_has"] = True
    out.loc[out["run_date"] < SESSIONS, "momentum_5_has"] = False  # no call without 5 sessions before
    return out


def test_a_registered_baseline_is_called_scored_and_stored_per_fold(momentum):
    rng = np.random.default_rng(11)
    close = 100 + np.cumsum(rng.choice([-1.0, 1.0], size=60))
    prev = np.concatenate([[np.nan], close[:-1]])
    rows = np.arange(40, 59)
    calls = baselines.calls(close, prev, rows)
    assert set(calls) == {"always_up", "persistence", "trend", "momentum_5"}
    assert np.array_equal(calls["momentum_5"], np.sign(close[rows] - close[rows - 5]))
    actual = close[rows + 1]
    right = rng.random(len(rows)) < 0.6
    scored = baselines.score(right, actual, close[rows], calls)
    stored = baselines.fold_rows("bt", 1, scored)
    assert {r["baseline"] for r in stored} == {"persistence", "trend", "momentum_5"}
    fold = {
        "n": len(rows),
        "always_up_accuracy": scored["always_up"].accuracy,
        "model_only_hits": scored["always_up"].model_only,
        "up_only_hits": scored["always_up"].base_only,
        "baselines": {r["baseline"]: r for r in stored},
    }
    assert baselines.pooled([fold, fold])["momentum_5"] == scored["momentum_5"] + scored["momentum_5"]


def test_a_registered_board_baseline_reaches_the_board_and_its_bh_family(momentum):
    from ldtm_core.accountability.board import leaderboard as lb
    from ldtm_core.cli.accountability import board_cells

    board = board_stats.board_from_rows(_rows(np.random.default_rng(3)))
    for what in ("accuracy", "n", "model_only", "base_only", "p", "q", "beats"):
        assert momentum.column(what) in board, what
    assert (board["momentum_5_n"] == 40 - SESSIONS).all()
    # One BH family over every (ticker, board baseline) test: 4 tickers x 4 baselines.
    ps = np.concatenate(
        [
            board[c].to_numpy()
            for c in ("skill_p_value", "persistence_p_value", "trend_p_value", "momentum_5_p_value")
        ]
    )
    q = multipletests(ps, method="fdr_bh")[1]
    assert board["q_vs_momentum_5"].to_numpy() == pytest.approx(q[12:])
    assert board["q_vs_always_up"].to_numpy() == pytest.approx(q[:4])
    assert baselines.family_size(4) == 16
    # The family size is shown wherever the q-values are: the verdict and the label rule.
    shown = board.rename(columns={"key": "ticker"}).assign(stale=False)
    rule = board_stats.label_rule(shown)
    assert "16 tests over 4 scored rows x 4 baselines" in rule and "5-day momentum" in rule
    # The display columns, the CLI's cells and the SPA's choice of baseline follow the registry.
    columns = lb.display_columns()
    assert [c for c in columns if "momentum_5" in c] == [
        "momentum_5_accuracy",
        "momentum_5_n",
        "momentum_5_model_only",
        "momentum_5_only",
        "momentum_5_p_value",
        "q_vs_momentum_5",
        "beats_momentum_5",
        "e_vs_momentum_5",  # the record's evidence against it (accountability.board.record)
    ]
    labels = [c.label for c in board_cells()]
    assert {"5-day momentum", "model/mom5 only", "p (q) vs mom5", "beats mom5"} <= set(labels)
    assert "e vs coin/up/persist./trend/mom5" in labels
    assert "momentum_5_n" in lb.counts()
    rows = _rows(np.random.default_rng(4))
    rows["momentum_5_right"] = rows["momentum_5_has"]  # momentum is right on every evening it calls
    assert set(board_stats.best_baselines(rows, ["AAA", "BBB"]).values()) == {"momentum_5"}
    answer = board_stats.universe_test(rows, rows, ["AAA", "BBB"])
    assert answer.baselines == {"momentum_5": 2} and "5-day momentum for 2" in answer.describe()


def test_a_registered_gate_baseline_reaches_every_gate_report(momentum):
    from ldtm_core.accountability.gate.report import GateReport
    from ldtm_core.cli.gate_tables import baselines_table

    fold = {
        "n": 60,
        "always_up_accuracy": 0.5,
        "model_only_hits": 9,
        "up_only_hits": 6,
        "baselines": {"momentum_5": {"n": 60, "hits": 27, "model_only": 12, "base_only": 6}},
    }
    pooled = baselines.pooled([fold, fold])
    assert pooled["momentum_5"] == Paired("momentum_5", 120, 54, 24, 12)
    assert pooled["trend"] is None  # not stored for these folds: unknown
    report = GateReport("AAPL", 1, "bt", 2, 120, 0.55, 0.5, 1.0, 0, baselines=pooled)
    lines = report.baseline_lines()
    assert any(line.startswith("model beats 5-day momentum (45.00%)") for line in lines)
    assert "trailing-21 majority: unknown" in " ".join(lines)
    assert "beats 5-day momentum" in report.summary()
    payload = report.to_dict()
    assert payload["baselines"]["momentum_5"]["model_only"] == 24
    table = baselines_table(report)
    assert "5-day momentum" in list(table.columns[0].cells)


def test_a_late_price_revision_does_not_change_a_recorded_call_on_the_board(
    momentum, engine, db_url, tmp_path, monkeypatch
):
    """The board scores the call recorded with the prediction (chain version 3), never re-reading prices:
    a close revised after the evening changes neither the call nor the audit's verdict. A row written
    under version 2 has no recorded momentum call (it reads more than the row's two closes): no call."""
    from accountability_helpers import ingest, make_model, make_settings

    from ldtm_core.accountability.board.reads import next_day_rows
    from ldtm_core.accountability.ledger import chain
    from ldtm_core.accountability.ledger.audit import verify
    from ldtm_core.accountability.ledger.chain import AUDIT_KEY_ENV
    from ldtm_core.accountability.ledger.snapshots import predict
    from ldtm_core.data.ingest import ingest_frame

    monkeypatch.delenv(AUDIT_KEY_ENV, raising=False)
    settings = make_settings(tmp_path, db_url)
    df = ingest(engine, ["AAPL"])
    make_model(engine, settings, "AAPL")
    dates = sorted(df["date"].unique())
    old, new = dates[-12], dates[-6]
    with monkeypatch.context() as m:
        m.setattr(chain, "CHAIN_VERSION", 2)
        predict(engine, settings, run_date=old)
    predict(engine, settings, run_date=new)

    def calls():
        rows = next_day_rows(engine, ["AAPL"], old, new).set_index("run_date")
        return {d: (bool(rows.loc[d, "momentum_5_has"]), rows.loc[d, "persistence_has"]) for d in (old, new)}

    before = next_day_rows(engine, ["AAPL"], new, new).iloc[0]
    assert calls() == {old: (False, True), new: (True, True)}
    closes = df.set_index("date")["close"]
    at = dates.index(new)
    said = np.sign(closes[new] - closes[dates[at - SESSIONS]])
    # A revision of the close five sessions back that would flip the rule's call today.
    bar = df[df["date"] == dates[at - SESSIONS]].copy()
    for c in ("open", "high", "low", "close"):
        bar[c] = closes[new] * (1.5 if said > 0 else 0.5)
    ingest_frame(engine, bar, "vendor", force=True)
    after = next_day_rows(engine, ["AAPL"], new, new).iloc[0]
    assert after["baseline_calls"] == before["baseline_calls"]
    assert bool(after["momentum_5_has"]) and after["momentum_5_right"] == before["momentum_5_right"]
    assert json.loads(after["baseline_calls"])["momentum_5"] == int(said)  # the evening's call, kept
    assert verify(engine).ok
