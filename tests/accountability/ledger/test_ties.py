"""Issue 28 item 11: a zero next-day move is a tie, neither a hit nor a miss of the model or of any
baseline: left out of n and every direction accuracy, counted as `ties`, everywhere direction is scored
(backtest, fillback, re-fill, audit, the accuracy views, the baselines, the skill test)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from accountability_helpers import make_model, make_settings
from sqlalchemy import select, text

from ldtm_core.accountability.ledger.audit import verify
from ldtm_core.accountability.ledger.chain import AUDIT_KEY_ENV
from ldtm_core.accountability.ledger.fillback import fillback
from ldtm_core.accountability.ledger.refill import refill
from ldtm_core.accountability.ledger.snapshots import predict
from ldtm_core.data.ingest import ingest_frame
from ldtm_core.data.synthetic_market import generate
from ldtm_core.learning import backtest as bt
from ldtm_core.learning.model import get_profile
from ldtm_core.schema import backtest_folds, snapshots
from ldtm_core.scoring import baselines

CFG = get_profile("demo", max_epochs=2, patience=1)


def test_score_and_skill_leave_ties_out():
    close = np.array([100.0, 100.0, 100.0, 100.0])
    actual = np.array([101.0, 99.0, 100.0, 100.0])  # two ties
    pred = np.array([101.0, 101.0, 100.5, 100.0])  # a hit, a miss, then two tie rows
    hits, up, _mape, ties = bt.score(pred, actual, close)
    assert (hits, up, ties) == (1, 1, 2)
    skill = bt.skill_test(pred, actual, close)
    assert (skill.model_only, skill.up_only) == (0, 0)  # hit+up, miss+down: no disagreement


def test_baselines_leave_ties_out():
    close = np.array([100.0, 100.0, 100.0])
    prev = np.array([100.0, 99.0, 100.0])
    actual = np.array([100.0, 101.0, 101.0])  # a tie; then up after an up day, up after a flat day
    model_right = np.array([True, False, True])
    calls = baselines.calls(close, prev, np.arange(3))
    got = baselines.score(model_right, actual, close, calls)
    assert got["always_up"].n == 2 and got["always_up"].hits == 2
    # Persistence: right after the up day; a flat day calls no move, so a move is its miss.
    assert got["persistence"].n == 2 and got["persistence"].hits == 1
    assert (got["persistence"].model_only, got["persistence"].base_only) == (1, 1)


def _flat(start="2022-06-01", end="2024-06-28") -> pd.DataFrame:
    df = generate(["AAPL"], start, end, seed=7)
    for c in ("open", "high", "low", "close"):
        df[c] = 100.0
    return df


def test_a_constant_price_ticker_scores_no_direction(engine, db_url, tmp_path):
    settings = make_settings(tmp_path, db_url)
    ingest_frame(engine, _flat(), "synthetic")
    make_model(engine, settings, "AAPL", cfg=CFG)
    res = bt.run_backtest(engine, settings, "AAPL", CFG, folds=2, test_sessions=10)
    for f in res.folds:
        # n stays the fold's test rows; all 10 are ties, scored by nobody.
        assert (f.scores.n, f.scores.ties, f.scores.hits, f.scores.up_hits) == (10, 10, 0, 0)
        assert f.scores.always_up_accuracy == 0.0 and f.scores.baselines["always_up"].n == 0
        assert f.scores.baselines["persistence"].hits == 0 and f.scores.baselines["persistence"].n == 0
        assert (f.scores.model_only_hits, f.scores.up_only_hits) == (0, 0)
    assert res.skill.p_value == 1.0
    with engine.connect() as conn:
        rows = conn.execute(select(backtest_folds.c.n, backtest_folds.c.ties)).all()
    assert sorted(tuple(r) for r in rows) == [(10, 10), (10, 10)]


def _row(engine, run_date):
    with engine.connect() as conn:
        return conn.execute(select(snapshots).where(snapshots.c.run_date == run_date)).one()


def test_a_stored_zero_move_is_a_tie_in_fillback_refill_audit_and_views(
    engine, db_url, tmp_path, monkeypatch
):
    monkeypatch.delenv(AUDIT_KEY_ENV, raising=False)
    settings = make_settings(tmp_path, db_url)
    df = generate(["AAPL"], "2023-01-03", "2024-06-28", seed=7)
    dates = sorted(df["date"].unique())
    flat_day, moved_day = dates[-10], dates[-12]
    nxt = dates[dates.index(flat_day) + 1]
    same = df["date"] == nxt
    for c in ("open", "high", "low", "close"):  # the next close equals the run date's: a zero move
        df.loc[same, c] = float(df.loc[df["date"] == flat_day, "close"].iloc[0])
    df.loc[same, "high"] = df.loc[same, "close"] * 1.001
    df.loc[same, "low"] = df.loc[same, "close"] * 0.999
    ingest_frame(engine, df, "synthetic")
    make_model(engine, settings, "AAPL")
    predict(engine, settings, run_date=flat_day)
    predict(engine, settings, run_date=moved_day)
    fillback(engine)
    row = _row(engine, flat_day)
    assert row.next_day_actual == row.run_date_close
    assert row.next_day_direction_actual == "neutral"
    assert row.next_day_direction_correct is None  # a tie: neither right nor wrong
    assert _row(engine, moved_day).next_day_direction_correct is not None
    report = verify(engine)
    assert report.ok, [p.what for p in report.problems]
    with engine.connect() as conn:
        view = conn.execute(
            text(  # the candidate's rows are ungated: the view that keeps them
                "SELECT n, ties, hits, always_up_accuracy FROM accuracy_30d_with_in_sample_and_ungated "
                "WHERE mode = 'all'"
            )
        ).one()
    moved = _row(engine, moved_day)
    assert (view.n, view.ties) == (1, 1)
    assert view.hits == int(bool(moved.next_day_direction_correct))
    assert view.always_up_accuracy == float(moved.next_day_actual > moved.run_date_close)
    # A revision to the tie is re-filled by the same rule (and the other way round).
    bar = df[df["date"] == nxt].copy()
    for c in ("open", "high", "low", "close"):
        bar[c] = bar[c] * 1.01
    ingest_frame(engine, bar, "vendor", force=True)
    refill(engine)
    assert _row(engine, flat_day).next_day_direction_correct is not None
    assert verify(engine).ok
    for c in ("open", "high", "low", "close"):
        bar[c] = bar[c] / 1.01
    ingest_frame(engine, bar, "vendor", force=True)
    refill(engine)
    assert _row(engine, flat_day).next_day_direction_correct is None
    assert verify(engine).ok


@pytest.mark.parametrize("n_ties", [0, 3])
def test_pooled_baselines_from_stored_folds_use_the_scored_rows(n_ties):
    fold = {
        "n": 7 + n_ties,
        "always_up_accuracy": 4 / 7,
        "model_only_hits": 1,
        "up_only_hits": 2,
        "baselines": {"trend": {"n": 7, "hits": 5, "model_only": 0, "base_only": 1}},
        "ties": n_ties,
    }
    got = baselines.from_fold(fold)
    assert got["always_up"].n == 7 and got["always_up"].hits == 4
    assert got["trend"].n == 7 and got["trend"].hits == 5


def test_the_ticker_report_scores_no_tie():
    from ldtm_core.accountability.board.reports import rolling_accuracy, scored, ticker_skill

    preds = pd.DataFrame(
        {
            "run_date": pd.to_datetime(["2024-01-02", "2024-01-03", "2024-01-04"]).date,
            "run_date_close": [100.0, 100.0, 100.0],
            "next_day_actual": [101.0, 100.0, None],  # a hit, a tie, unfilled
            "correct": [True, None, None],
            "went_up": [True, False, None],
        }
    )
    assert len(scored(preds)) == 1
    assert rolling_accuracy(preds)["n"].tolist() == [1]
    assert rolling_accuracy(preds)["model"].tolist() == [1.0]
    skill = ticker_skill(preds)
    assert (skill.model_only, skill.up_only) == (0, 0)


def test_the_decay_record_scores_no_tie(engine, db_url, tmp_path):
    from decay_helpers import evenings, planted_model, snapshot_row
    from sqlalchemy import insert

    from ldtm_core.accountability.decay import record as decay_record

    settings = make_settings(tmp_path, db_url)
    model_id = planted_model(engine, settings, "AAPL")
    days = evenings(3)
    rows = [snapshot_row("AAPL", model_id, d, True, True) for d in days]
    rows[1] |= {"next_day_actual": 100.0, "next_day_direction_correct": None}  # a zero move
    with engine.begin() as conn:
        conn.execute(insert(snapshots), rows)
    record = decay_record.published_record(engine, "AAPL")
    assert record["run_date"].tolist() == [days[0], days[2]]
    assert record["hit"].all()


def test_with_many_ties_the_always_up_test_keeps_its_false_rate_and_finds_a_planted_edge():
    """30 % zero moves: a coin-flipping model "beats always-up" at p <= 0.05 in at most ~5 % of worlds,
    and a model that knows 15 % of the real moves in far more (through baselines.score and the backtest's
    scoring, ties left out)."""
    rng = np.random.default_rng(0)
    n, sims, tie = 250, 600, 0.3
    moves = [-1.0, 0.0, 1.0]
    p = [(1 - tie) / 2, tie, (1 - tie) / 2]
    rates = {}
    for edge in (0.0, 0.15):
        rejected = 0
        for _ in range(sims):
            close = 100 + np.cumsum(rng.choice(moves, size=n, p=p))
            actual = close + rng.choice(moves, size=n, p=p)
            truth = np.sign(actual - close)
            call = rng.choice([-1.0, 1.0], size=n)
            call = np.where((rng.random(n) < edge) & (truth != 0), truth, call)
            pred = close + 0.5 * call
            right = np.sign(pred - close) == truth
            got = baselines.score(right, actual, close, {"always_up": np.ones(n)})["always_up"]
            skill = bt.skill_test(pred, actual, close)
            assert (skill.model_only, skill.up_only) == (got.model_only, got.base_only)
            assert got.n == int((truth != 0).sum())
            rejected += got.p_value <= 0.05
        rates[edge] = rejected / sims
    assert rates[0.0] <= 0.05 + 2 * (0.05 * 0.95 / sims) ** 0.5, rates  # one-sided exact test: <= 5 %
    assert rates[0.15] >= 0.25, rates
