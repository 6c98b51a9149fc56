"""Signal performance (issue 30): the rows chosen, an independent recomputation of a book from the stored
rows and prices, a split that is not a -90 % day, HAC / PSR / DSR against known values, and a no-skill
market read as no skill while a planted edge is found."""

from __future__ import annotations

import datetime as dt
import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats
from signals_helpers import frame_rows, register, rows_for, seed_market, write
from sqlalchemy import select

from ldtm_core.accountability.ledger.fillback import fillback
from ldtm_core.accountability.signals import ic as signal_ic
from ldtm_core.accountability.signals import stats as signal_stats
from ldtm_core.accountability.signals.execution import with_held
from ldtm_core.accountability.signals.portfolios import simulate
from ldtm_core.accountability.signals.rows import RowChoice, load_rows
from ldtm_core.accountability.signals.signals import explain, signal_report
from ldtm_core.data.corporate_actions import Action, record_actions
from ldtm_core.db import lift_append_only
from ldtm_core.errors import InputError
from ldtm_core.horizons import NAMES
from ldtm_core.schema import prices, snapshots
from ldtm_core.scoring import hac

TICKERS = ["AAPL", "MSFT", "NVDA", "AMZN", "JPM", "TSLA"]


@pytest.fixture
def market(engine):
    df = seed_market(engine, TICKERS, "2023-01-03", "2023-05-31", skill=0.3, noise=0.01, seed=3)
    dates = sorted(pd.to_datetime(df["date"]).dt.date.unique())
    # Rows no book may use: a shadow row written first on an evening, a later second row of an evening,
    # an in-sample evening, and an ungated ticker's evenings.
    shadow_id = register(engine, "AAPL", status="shadow")
    cand_id = register(engine, "GOOGL", status="candidate")
    extra = generate_prices(engine, ["GOOGL"])
    first = {r["ticker"]: r["model_id"] for r in _published(engine)}
    d = dates[10]
    bogus = {"next_day_pred": 1e6, "direction_pred": "bullish"}
    rows = [
        {**rows_for(df[df["ticker"] == "AAPL"], {"AAPL": shadow_id}, version="shadow")[10], **bogus, "model_status": "shadow", "prev_hash": "s"},
        {**rows_for(df[df["ticker"] == "MSFT"], {"MSFT": first["MSFT"]}, version="v9")[12], **bogus, "direction_pred": "bearish", "prev_hash": "late"},
        {**rows_for(df[df["ticker"] == "NVDA"], {"NVDA": first["NVDA"]})[0], "run_date": dates[0] - dt.timedelta(days=1), "in_sample": True, "prev_hash": "in"},
        *rows_for(extra, {"GOOGL": cand_id}, status="candidate", version="cand"),
    ]  # fmt: skip
    assert rows[0]["run_date"] == d
    lift_append_only(engine)  # rewrites the record on purpose: SQLite's append-only triggers off
    with engine.begin() as conn:
        conn.execute(snapshots.delete().where(snapshots.c.ticker == "AAPL", snapshots.c.run_date == d))
    write(engine, [rows[0]])
    write(
        engine, [rows_for(df[df["ticker"] == "AAPL"], {"AAPL": first["AAPL"]})[10]]
    )  # the champion's, after
    write(engine, rows[1:])
    fillback(engine)
    return df, d


def generate_prices(engine, tickers):
    from ldtm_core.data.ingest import ingest_frame
    from ldtm_core.data.synthetic_market import generate

    df = generate(tickers, "2023-01-03", "2023-05-31", seed=4)
    ingest_frame(engine, df, "synthetic")
    return df


def _published(engine) -> list[dict]:
    with engine.connect() as conn:
        return [dict(r) for r in conn.execute(select(snapshots).order_by(snapshots.c.id)).mappings().all()]


@pytest.mark.parametrize("rule, lag", [("next_close", 1), ("same_close", 0)])
def test_a_book_recomputed_independently_from_the_stored_rows_and_prices(engine, market, rule, lag):
    """Not through the signals code: raw rows, the board's rule by hand, closes from the prices table,
    weights, drift, turnover and cost in a plain loop. next_close (the default) enters at the close of the
    session after the evening and exits at the one after; same_close (the old, same-bar rule) at the
    evening's own close and the next session's."""
    report = signal_report(engine, cost_bp=7.0, execution=rule)
    raw = pd.DataFrame(_published(engine))
    with engine.connect() as conn:
        px = pd.DataFrame(conn.execute(select(prices.c.ticker, prices.c.date, prices.c.close)).all())
    close = {(t, pd.Timestamp(d).date()): c for t, d, c in px.itertuples(index=False)}
    sessions = sorted({k[1] for k in close})
    nxt = dict(zip(sessions[:-1], sessions[1:], strict=True))
    enter = {e: nxt[e] if lag else e for e in sessions[:-1]}  # the session the book is bought at
    first = {}
    for r in raw.sort_values("id").itertuples():
        if r.model_status != "shadow":
            first.setdefault((r.ticker, pd.Timestamp(r.run_date).date()), r)
    chosen = [
        r for r in first.values()
        if r.model_status == "active" and not r.in_sample and r.next_day_actual == r.next_day_actual
    ]  # fmt: skip
    evenings = sorted({pd.Timestamp(r.run_date).date() for r in chosen})
    prev_w: dict = {}
    prev_r: dict = {}
    prev_g = 0.0
    want = []
    for e in evenings:
        book = [r for r in chosen if pd.Timestamp(r.run_date).date() == e and r.direction_pred != "neutral"]
        w = {r.ticker: (1 if r.direction_pred == "bullish" else -1) / len(book) for r in book}
        ret = {t: close[(t, nxt[enter[e]])] / close[(t, enter[e])] - 1 for t in w}
        g = sum(w[t] * ret[t] for t in w)
        drifted = {t: prev_w[t] * (1 + prev_r[t]) / (1 + prev_g) for t in prev_w}
        turnover = sum(abs(w.get(t, 0) - drifted.get(t, 0)) for t in set(w) | set(drifted))
        want.append((e, g, turnover, g - turnover * 7.0 / 10_000))
        prev_w, prev_r, prev_g = w, ret, g
    got = report.portfolios["long_short"].daily
    assert list(got["run_date"]) == [w[0] for w in want]
    np.testing.assert_allclose(got["gross"], [w[1] for w in want], rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(got["turnover"], [w[2] for w in want], rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(got["net"], [w[3] for w in want], rtol=1e-9, atol=1e-12)
    # The benchmark: every ticker with both closes, equal weight (the ungated GOOGL included: it is in
    # the universe even when its rows are not in the book).
    e = evenings[5]
    a, b = enter[e], nxt[enter[e]]
    names = [t for t in TICKERS + ["GOOGL"] if (t, a) in close and (t, b) in close]
    assert report.benchmark.loc[e] == pytest.approx(
        np.mean([close[(t, b)] / close[(t, a)] - 1 for t in names])
    )
    assert "GOOGL" in report.universe and report.out_of_book["out"].min() >= 1


def test_the_board_rule_and_its_flags(engine, market):
    _, shadow_evening = market
    rows = load_rows(engine)
    day = rows.rows[rows.rows["run_date"] == pd.Timestamp(shadow_evening)].set_index("ticker")
    assert day.loc["AAPL", "model_status"] == "active" and day.loc["AAPL", "next_day_pred"] < 1e5
    assert day.loc["MSFT", "model_version"] != "v9"  # the later second row of the evening never counts
    assert "GOOGL" not in set(rows.rows["ticker"]) and rows.hidden_ungated > 0 and rows.hidden_in_sample == 1
    assert "GOOGL" in set(load_rows(engine, RowChoice(include_ungated=True)).rows["ticker"])
    assert (load_rows(engine, RowChoice(include_in_sample=True)).rows["in_sample"]).sum() == 1
    assert load_rows(engine, RowChoice(mode="live")).rows.empty
    what_if = load_rows(engine, RowChoice(shadow=True)).rows
    assert (
        what_if[(what_if["run_date"] == pd.Timestamp(shadow_evening)) & (what_if["ticker"] == "AAPL")][
            "model_status"
        ].item()
        == "shadow"
    )
    table, totals = explain(engine, shadow_evening)
    assert table.set_index("ticker").loc["GOOGL", "status"] == "out: ungated (candidate)"
    assert table["contrib_long_short"].sum() == pytest.approx(totals["long_short_gross"])
    with pytest.raises(InputError, match="no published row"):
        explain(engine, dt.date(2020, 1, 2))
    with pytest.raises(InputError, match="mode"):
        RowChoice(mode="paper")


def test_a_split_between_run_date_and_target_is_not_a_minus_90_percent_day(engine):
    ex = dt.date(2023, 3, 15)
    df = seed_market(engine, ["NVDA", "AAPL", "MSFT"], "2023-01-03", "2023-05-31", splits={"NVDA": [(ex, 10.0)]}, fill=False)  # fmt: skip
    raw = df[df["ticker"] == "NVDA"].set_index("date")["close"]
    days = sorted(raw.index)
    before = days[days.index(ex) - 1]
    assert raw[ex] / raw[before] - 1 < -0.85  # the stored closes do fall 90 %
    with engine.begin() as conn:
        record_actions(conn, [Action("NVDA", ex, 0.1, "split", "test")])
    fillback(engine)
    report = signal_report(engine)
    rows = load_rows(engine).rows
    for h in NAMES:
        assert rows[f"real_{h}"].min() > -0.5, h
    assert report.portfolios["long_short"].returns["NVDA"].abs().max() < 0.3
    assert report.benchmark.abs().max() < 0.2
    assert report.portfolios["long_only"].daily["gross"].min() > -0.3


def test_the_ic_and_spread_tests_are_the_overlap_aware_helper():
    """Every overlap-aware figure goes through scoring.hac: the summaries' t, p and degrees of freedom
    are its test on the daily series, with the horizon's overlap; a short record prints no p-value."""
    rng = np.random.default_rng(0)
    pred, real = rng.standard_normal((250, 20)), rng.standard_normal((250, 20))
    rows = frame_rows(pred * 0.01 + real * 0.002, real * 0.01).rows
    ic = signal_ic.ic_summary(rows).set_index("horizon")
    spread = signal_ic.quintile_summary(rows).set_index("horizon")
    for h in NAMES:
        want = hac.mean_test(signal_ic.ic_series(rows, h)["ic"], signal_ic.HORIZON_SESSIONS[h])
        assert (ic.loc[h, "hac_t"], ic.loc[h, "hac_p"], ic.loc[h, "hac_dof"]) == (
            want.t,
            want.p_two_sided,
            want.dof,
        )
        got = hac.mean_test(signal_ic.quintile_returns(rows, h)["spread"], signal_ic.HORIZON_SESSIONS[h])
        assert spread.loc[h, "spread_hac_p"] == got.p_two_sided
    assert ic.loc["one_month", "periods"] == pytest.approx(250 / 21) and ic.loc["one_month", "untested"] == ""
    short = signal_ic.ic_summary(frame_rows(pred[:150] * 0.01, real[:150] * 0.01).rows).set_index("horizon")
    assert (
        math.isnan(short.loc["one_month", "hac_p"])
        and "too short to test" in short.loc["one_month", "untested"]
    )
    assert math.isfinite(short.loc["next_day", "hac_p"])


def test_an_evening_whose_predictions_all_tie_has_no_quintiles():
    """On main the tied evening was binned by ticker order (the first names in q1, the last in q5)."""
    x = np.array([[0.01] * 10, [5.0, 1.0, 3.0, 2.0, 4.0, 9.0, 7.0, 8.0, 6.0, 0.0]])
    labels = signal_ic.quintile_labels(x)
    assert np.isnan(labels[0]).all() and np.isfinite(labels[1]).all()


def test_psr_and_dsr_against_the_papers_numerical_example():
    """Bailey & Lopez de Prado (2014), section 'A numerical example': N = 100 trials, V[SR_n] = 1/2
    (annualised), T = 1250 daily returns, annualised SR 2.5, skewness -3, kurtosis 10 -> SR0 = 0.1132 per
    day and DSR = 0.9004."""
    sr0 = signal_stats.expected_max_sharpe(100, 0.5 / 250)
    assert sr0 == pytest.approx(0.1132, abs=5e-5)
    dsr = signal_stats.psr_from_moments(2.5 / math.sqrt(250), 1250, -3.0, 10.0, sr0)
    assert dsr == pytest.approx(0.9004, abs=5e-4)
    # PSR (2012) on a series: the moments are the series' own (scipy, non-excess kurtosis).
    r = np.random.default_rng(1).standard_t(5, 500) * 0.01 + 0.001
    from scipy import stats

    sr = r.mean() / r.std(ddof=1)
    want = stats.norm.cdf(
        sr
        * math.sqrt(499)
        / math.sqrt(1 - stats.skew(r) * sr + (stats.kurtosis(r, fisher=False) - 1) / 4 * sr**2)
    )
    assert signal_stats.psr(r) == pytest.approx(want, rel=1e-12)
    assert signal_stats.dsr(r, 1) == pytest.approx(signal_stats.psr(r))
    assert signal_stats.dsr(r, 50) < signal_stats.psr(r)


def test_drawdown_dates_and_empyrical_figures():
    days = [dt.date(2024, 1, d) for d in (2, 3, 4, 5, 8, 9)]
    r = pd.Series([0.10, -0.20, 0.05, 0.20, -0.01, 0.02], index=days)
    dd = signal_stats.max_drawdown_dates(r)
    assert dd.depth == pytest.approx(-0.20) and dd.peak == days[0] and dd.trough == days[1]
    assert dd.recovered == days[3]  # 1.1 * 0.8 * 1.05 * 1.2 = 1.109 >= 1.1
    s = signal_stats.summary(r, 1)
    assert s["max_drawdown"] == pytest.approx(dd.depth)
    assert s["sharpe"] == pytest.approx(r.mean() / r.std(ddof=1) * math.sqrt(252))


def _universe_figures(pred: np.ndarray, real: np.ndarray) -> tuple[float, float, float]:
    """(next-day mean IC, its p, the long/short DSR after one recipe) through the signals code."""
    rows = frame_rows(pred, real).rows
    ic = signal_ic.ic_summary(rows).set_index("horizon").loc["next_day"]
    book = simulate(with_held(rows, "same_close"), "long_short", 5.0)  # the planted edge is same-bar
    return ic["mean_ic"], ic["hac_p"], signal_stats.dsr(book.daily["net"], 1)


def test_no_skill_reads_as_no_skill_and_a_planted_edge_is_found():
    """100 null universes and 100 with a planted edge (30 tickers x 200 evenings, predicted return =
    0.1 x realised + noise, IC about 0.1): the next-day IC's HAC test says "positive at 5 %" at about alpha/2 under the
    null and almost always with the edge; the long/short DSR passes 0.95 at about alpha under the null."""
    rng = np.random.default_rng(20)
    runs = 100
    found = {False: 0, True: 0}
    dsr_pass = {False: 0, True: 0}
    for edge in (False, True):
        for _ in range(runs):
            real = rng.standard_normal((200, 30)) * 0.015
            pred = (0.1 if edge else 0.0) * real + rng.standard_normal((200, 30)) * 0.015
            ic, p, dsr = _universe_figures(pred, real)
            found[edge] += bool(p <= 0.05 and ic > 0)
            dsr_pass[edge] += bool(dsr > 0.95)
    assert found[False] <= 6 and dsr_pass[False] <= 10  # ~2.5 and ~5 expected
    assert found[True] >= 95 and dsr_pass[True] >= 80


def test_overlapping_month_ics_need_the_overlap_aware_test():
    """One-month targets of consecutive evenings share 20 of 21 sessions: under no skill the plain t
    (lag 0) rejects far above 5 %, the overlap-aware test near it (100 universes, 20 tickers x 250)."""
    rng = np.random.default_rng(5)
    plain = aware = 0
    runs = 100
    for _ in range(runs):
        real, pred = (
            np.lib.stride_tricks.sliding_window_view(rng.standard_normal((270, 20)), 21, axis=0).sum(axis=-1)[
                :250
            ]
            for _ in range(2)
        )
        ic = signal_ic.ic_series(frame_rows(pred * 0.001, real * 0.01).rows, "one_month")["ic"]
        plain += stats.ttest_1samp(ic, 0.0).pvalue <= 0.05
        aware += hac.mean_test(ic, 21).p_two_sided <= 0.05
    assert plain / runs > 0.3
    assert aware / runs <= 0.12


def test_quintiles_follow_qcut_on_ranks():
    x = np.array([[5.0, 1.0, 3.0, 2.0, 4.0, 9.0, 7.0, 8.0, 6.0, 0.0, np.nan]])
    want = pd.qcut(pd.Series(x[0]).dropna(), 5, labels=False) + 1
    got = signal_ic.quintile_labels(x)[0]
    assert np.isnan(got[-1]) and list(got[:-1]) == list(want)


def test_cost_setting_is_checked(monkeypatch, engine):
    monkeypatch.setenv("LDTM_SIGNAL_COST_BP", "-1")
    from ldtm_core.errors import ConfigError

    with pytest.raises(ConfigError, match="LDTM_SIGNAL_COST_BP"):
        signal_report(engine)


def test_empty_database_reads_as_nothing_yet(engine):
    report = signal_report(engine)
    assert report.evenings == [] and "nothing to trade" in report.headline()
    assert simulate(with_held(load_rows(engine).rows, "same_close"), "long_only", 5).daily.empty
    assert report.execution == "next_close"


def test_the_dsr_counts_the_recipes_the_trials_ledger_judged(engine):
    """Three recipes judged by the gate for AAPL count three trials, though one config is registered."""
    from sqlalchemy import insert

    from ldtm_core.schema import gate_trials

    model_id = register(engine, "AAPL")
    assert signal_stats.recipes_tried(engine, ["AAPL"]).n == 1
    with engine.begin() as conn:
        for i, sig in enumerate(("a" * 64, "b" * 64, "c" * 64)):
            conn.execute(
                insert(gate_trials).values(
                    ticker="AAPL",
                    config_signature=sig,
                    evidence_key=f"{i}" * 64,
                    cutoffs="2024-03-28",
                    kind="recipe change",
                    backtest_id=f"bt{i}",
                    model_id=model_id,
                    trials=i + 1,
                    alpha_adjusted=0.05 / (i + 1),
                    decision="fail",
                    judged_at=dt.datetime.now(dt.UTC),
                )  # fmt: skip
            )
    trials = signal_stats.recipes_tried(engine, ["AAPL"])
    assert trials.n == 3 and "ledger" in trials.source
    assert signal_stats.recipes_tried(engine, ["MSFT"]).n == 1  # another ticker's tries are not these
