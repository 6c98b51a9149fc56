"""Issue 40, the signal report's smaller defects, each pinned by a test that failed before its fix: the
benchmark row got a DSR, the DSR's trial count ignored the tickers the gate chose among, the headline
counted tickers with rows as tickers traded, the hit rate counted a zero move as a miss, a cost could take
a book below zero, a short record's annual figures carried no caveat, and `--explain` built its books and
benchmark from a 14-day window that could disagree with the report."""

from __future__ import annotations

import datetime as dt
import math

import numpy as np
import pandas as pd
import pytest
from signals_helpers import frame_rows, register, seed_market
from sqlalchemy import insert

from ldtm_core.accountability.signals import stats as signal_stats
from ldtm_core.accountability.signals.execution import with_held
from ldtm_core.accountability.signals.portfolios import LABELS, simulate
from ldtm_core.accountability.signals.rows import Rows, with_returns
from ldtm_core.accountability.signals.signals import explain, report_from_rows, signal_report
from ldtm_core.accountability.signals.stats import Trials
from ldtm_core.db import lift_append_only
from ldtm_core.horizons import NAMES
from ldtm_core.schema import gate_trials, snapshots


def report_on(pred: np.ndarray, real: np.ndarray, cost_bp: float = 5.0, trials: int = 1):
    rows = frame_rows(pred, real)
    days = sorted(rows.rows["run_date"].unique())
    bench = pd.Series(real.mean(axis=1), index=[pd.Timestamp(d).date() for d in days])
    return report_from_rows(rows, bench, cost_bp, Trials(trials, "test"), execution="same_close")


def universe(evenings: int, names: int = 6, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    real = rng.standard_normal((evenings, names)) * 0.01
    return 0.3 * real + rng.standard_normal((evenings, names)) * 0.01, real


def test_the_benchmark_row_has_no_dsr():
    """The benchmark was not selected among trials: no DSR (and no test against itself)."""
    s = report_on(*universe(200), trials=10).summary().set_index(["portfolio", "basis"])
    bench = s.loc[(LABELS["benchmark"], "gross")]
    assert math.isnan(bench["dsr"]) and math.isnan(bench["p_sharpe_above_benchmark"])
    book = s.loc[(LABELS["long_short"], "net")]
    assert math.isfinite(book["dsr"]) and math.isfinite(book["p_sharpe_above_benchmark"])


def test_the_dsr_counts_the_ticker_recipe_pairs_selected_among(engine):
    """Six tickers, one recipe each, all registered: the books were selected among 6 trials (was 1);
    two recipes judged on each of three tickers: 6 (was 2)."""
    tickers = ["AAPL", "MSFT", "NVDA", "AMZN", "JPM", "TSLA"]
    ids = {t: register(engine, t) for t in tickers}
    trials = signal_stats.recipes_tried(engine, tickers)
    assert trials.n == 6 and "1 recipe(s) across 6 ticker(s)" in trials.source
    with engine.begin() as conn:
        for i, t in enumerate(tickers[:3]):
            for sig in ("a" * 64, "b" * 64):
                conn.execute(
                    insert(gate_trials).values(
                        ticker=t,
                        config_signature=sig,
                        evidence_key=f"{i}{sig[0]}".ljust(64, "0"),
                        cutoffs="2024-03-28",
                        kind="recipe change",
                        backtest_id=f"bt{i}{sig[0]}",
                        model_id=ids[t],
                        trials=1,
                        alpha_adjusted=0.05,
                        decision="fail",
                        judged_at=dt.datetime.now(dt.UTC),
                    )  # fmt: skip
                )
    judged = signal_stats.recipes_tried(engine, tickers[:3])
    assert judged.n == 6 and "ledger" in judged.source and "2 recipe(s) across 3 ticker(s)" in judged.source


def test_the_headline_counts_the_tickers_traded():
    """Six tickers with rows, one of them ever out of the neutral band: '1 ticker traded (6 with rows)'
    (it said '6 tickers')."""
    pred, real = universe(60)
    pred[:, 1:] = 0.0  # neutral every evening: never held
    report = report_on(pred, real)
    assert "1 ticker traded (6 with rows)" in report.headline()
    assert report.tickers_traded() == ["T000"]
    assert "6 tickers traded," in report_on(*universe(60)).headline()


def test_the_hit_rate_leaves_ties_out():
    """Long T000 on four evenings: up, flat, flat, down -> 1 hit, 1 miss, 2 ties: 50 % (it said 25 %)."""
    pred = np.array([[0.01, -0.01]] * 4)
    real = np.array([[0.01, -0.02], [0.0, 0.01], [0.0, 0.0], [-0.01, -0.01]])
    contrib = report_on(pred, real).portfolios["long_short"].contributions().set_index("ticker")
    assert contrib.loc["T000", "hit_rate"] == pytest.approx(0.5)
    assert contrib.loc["T001", "hit_rate"] == pytest.approx(2 / 3)  # short: down, up, flat, down


def test_a_cost_never_takes_a_book_below_zero():
    """A book flipped every evening turns over 2; at 10,000 bp the cost was 200 % of the book, a net of
    about -200 % in one evening. Now the cost stops at the evening's wealth: net >= -100 %."""
    flip = np.where(np.arange(20) % 2 == 0, 0.01, -0.01)
    pred = np.column_stack([flip, -flip])
    real = np.random.default_rng(1).standard_normal((20, 2)) * 0.01
    report = report_on(pred, real, cost_bp=10_000)
    daily = report.portfolios["long_short"].daily
    assert daily["turnover"].iloc[1:].min() > 1.9
    assert daily["net"].min() >= -1.0 - 1e-12 and ((1 + daily["net"]).cumprod() >= -1e-12).all()
    assert (
        report.summary().set_index(["portfolio", "basis"]).loc[(LABELS["long_short"], "net"), "max_drawdown"]
        >= -1 - 1e-12
    )
    cheap = simulate(frame_rows(pred, real).rows, "long_short", 5.0).daily
    np.testing.assert_allclose(cheap["cost"], cheap["turnover"] * 5.0 / 10_000)  # far from the cap


def test_a_short_record_carries_the_annualisation_caveat():
    short = report_on(*universe(120))
    assert any("Short record" in n and "120 evenings" in n for n in short.notes)
    assert not any("Short record" in n for n in report_on(*universe(300)).notes)


def test_explain_agrees_with_the_report_for_its_evening(engine):
    """JPM's rows stop early (its prices go on: it stays in the report's equal-weight universe) and no
    row at all is published for three weeks before the evening: the 14-day window of --explain had
    another universe (another benchmark) and no book before the gap (another turnover)."""
    tickers = ["AAPL", "MSFT", "NVDA", "AMZN", "JPM"]
    df = seed_market(engine, tickers, "2023-01-03", "2023-05-31", skill=0.2)
    days = sorted(pd.to_datetime(df["date"]).dt.date.unique())
    evening = days[70]
    lift_append_only(engine)  # rewrites the record on purpose: SQLite's append-only triggers off
    with engine.begin() as conn:
        conn.execute(snapshots.delete().where(snapshots.c.ticker == "JPM", snapshots.c.run_date > days[20]))
        conn.execute(
            snapshots.delete().where(
                snapshots.c.run_date >= evening - dt.timedelta(days=21), snapshots.c.run_date < evening
            )
        )
    for rule in ("next_close", "same_close"):
        report = signal_report(engine, execution=rule)
        table, totals = explain(engine, evening, execution=rule)
        assert "JPM" in report.universe and "JPM" in set(table["ticker"])
        assert totals["benchmark"] == pytest.approx(report.benchmark.loc[evening], rel=1e-12)
        for k, p in report.portfolios.items():
            day = p.daily.set_index("run_date").loc[evening]
            for c in ("gross", "turnover", "cost", "net"):
                assert totals[f"{k}_{c}"] == pytest.approx(day[c], rel=1e-12, abs=1e-15), (rule, k, c)


def test_a_session_with_no_published_row_is_a_flat_evening_not_a_vanished_one():
    """One ticker, long every evening, one session in the middle with no published row at all. On main the
    book skipped it: its return was neither held nor flat and the re-entry was not charged."""
    from ldtm_core.accountability.signals.portfolios import simulate
    from ldtm_core.data.calendar import sessions_between

    days = sessions_between(dt.date(2024, 3, 4), dt.date(2024, 3, 8))
    published = [d for d in days if d != days[2]]
    frame = pd.DataFrame(
        {"ticker": "AAPL", "run_date": published, "in_sample": False, "model_status": "active",
         "run_date_close": 100.0, "direction_pred": "bullish"}
    )  # fmt: skip
    for h in NAMES:
        frame[f"{h}_date"], frame[f"{h}_pred"], frame[f"{h}_actual"] = frame["run_date"], 101.0, 101.0
    rows = with_held(with_returns(frame), "same_close")
    book = simulate(rows, "long_only", 10.0).daily.set_index("run_date")
    assert list(book.index) == days  # the missing session is an evening of the record
    gap = book.loc[days[2]]
    assert gap["gross"] == 0 and gap["long"] == 0 and gap["turnover"] == pytest.approx(1.0)  # sold out
    assert book.loc[days[3], "turnover"] == pytest.approx(1.0)  # and bought back, at a cost
    assert book.loc[days[3], "cost"] == pytest.approx(10.0 / 10_000)
    from ldtm_core.accountability.signals.signals import report_from_rows
    from ldtm_core.accountability.signals.stats import Trials

    report = report_from_rows(
        Rows(rows, ["AAPL"], 0, 0, 0, pd.DataFrame()), pd.Series(dtype=float), 10.0, Trials(1, "test"),
        execution="same_close",
    )  # fmt: skip
    assert any(n.startswith("1 session(s) with no published row: the books are flat") for n in report.notes)
