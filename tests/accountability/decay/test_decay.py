"""Decay alerts (issue 21): the Bernoulli CUSUM's designed false-alarm rate holds, it fires on a planted
decay within a bounded delay, PSI matches a hand computation, and the DB reader scores exactly the active
model's out-of-sample rows since its promotion."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from accountability_helpers import ingest, make_settings
from decay_helpers import (
    PLANTED_PROMISE,
    arl,
    evenings,
    expected_alarms,
    first_alarm,
    planted_model,
    planted_record,
)

from ldtm_core.accountability.decay import cusum, decay, drift
from ldtm_core.accountability.decay.decay import DecaySettings, Promise

TICKERS, SESSIONS, SEED = 200, 1000, 20211


def test_the_threshold_is_the_smallest_with_the_designed_arl_and_is_reproducible():
    d = cusum.design(0.60, 0.50, 1000)
    assert d.arl0 >= 1000 > cusum.average_run_length(d.a, d.b, d.steps - 1, 0.60)
    assert (d.a, d.b, d.steps) == (9, 20, 149) and d.h == pytest.approx(7.45)  # recorded in the docs
    assert cusum.design(0.60, 0.50, 1000) == d
    # k lies between the two miss rates (0.4 and 0.5), within the grid of the exact LLR reference value.
    exact = math.log(0.6 / 0.5) / math.log(0.5 * 0.6 / (0.4 * 0.5))
    assert 0.4 < d.k < 0.5 and abs(d.k - exact) < 1 / 40
    # Detection: a drop to 50 % (the design point) and to 45 % (the planted case) in sessions.
    assert arl(d, 0.50) < 120 and arl(d, 0.45) < 70


def test_false_alarms_over_200_tickers_x_1000_sessions_match_the_designed_rate():
    d = cusum.design(0.60, 0.50, 1000)
    rng = np.random.default_rng(SEED)
    misses = rng.random((TICKERS, SESSIONS)) >= 0.60  # a stable model, exactly as promised
    count = int(cusum.alarm_runs(d, misses).sum())
    expected = TICKERS * expected_alarms(d, 0.60, SESSIONS)  # exact, from the Markov chain
    assert 170 < expected < 200  # ~ 200 000 ticker-sessions / ARL0 1007 (less the head start from 0)
    assert abs(count - expected) < 4 * math.sqrt(expected), (count, expected)
    assert count == 186  # the figure recorded in docs/architecture.md (seed 20211)


def test_a_planted_drop_from_60_to_45_percent_is_caught_within_a_bounded_delay():
    d = cusum.design(0.60, 0.50, 1000)
    rng = np.random.default_rng(SEED)
    rate = np.where(np.arange(600) < 200, 0.60, 0.45)
    first = first_alarm(d, rng.random((TICKERS, 600)) >= rate)
    clean = first[(first < 0) | (first >= 200)]  # tickers without a false alarm before the drop
    delay = clean - 200
    assert len(clean) > 150 and (clean >= 0).all()  # every one of them is caught within 400 sessions
    assert np.median(delay) <= 60 and np.percentile(delay, 95) <= 150


def test_both_charts_together_keep_the_designed_rate_on_a_stable_model():
    """Each chart gets 2 x ARL0, so a ticker's alarms from either stay at ~1 per ARL0 sessions."""
    rng = np.random.default_rng(SEED)
    up = rng.random((TICKERS, SESSIONS)) < 0.53
    right = rng.random((TICKERS, SESSIONS)) < 0.60
    model_only, up_only = int((right & ~up).sum()), int((~right & up).sum())
    promise = Promise("b", "gate decision", TICKERS * SESSIONS, 0.60, 0.53, model_only, up_only)
    acc = cusum.design(0.60, 0.50, 2000)
    q0, rate = model_only / (model_only + up_only), (model_only + up_only) / promise.n
    vs_up = cusum.design(q0, q0 - 0.10, 2000 * rate)
    alarms = int(cusum.alarm_runs(acc, ~right).sum())
    for i in range(TICKERS):  # each ticker's discordant evenings, a sequence of its own length
        split = right[i] != up[i]
        alarms += int(cusum.alarm_runs(vs_up, (~right[i][split])[None, :])[0])
    expected = TICKERS * SESSIONS / 1000
    assert abs(alarms - expected) < 4 * math.sqrt(expected), alarms
    assert alarms == 190  # recorded in docs/architecture.md


def _promise(acc=0.60, model_only=60, up_only=40, n=250):
    return Promise("b", "gate decision", n, acc, 0.52, model_only, up_only)


def test_charts_on_one_record_stay_quiet_when_stable_and_fire_after_the_drop():
    rng = np.random.default_rng(5)
    days = evenings(400)
    up = rng.random(400) < 0.52
    settings = DecaySettings()
    stable = decay.charts_for(_promise(), rng.random(400) < 0.60, up, days, settings)
    assert [c.name for c in stable] == ["accuracy", "vs_always_up"] and not any(c.alarm for c in stable)
    hits = rng.random(400) < np.where(np.arange(400) < 200, 0.60, 0.45)
    charts = decay.charts_for(_promise(), hits, up, days, settings)
    acc = charts[0]
    assert acc.signals >= 1 and acc.last_signal >= days[200] and acc.statistic < acc.h  # restarted
    # With both charts each gets twice the ARL0, so the ticker's false alarms stay at one per ~ARL0.
    assert acc.arl0 >= 2000 and charts[1].arl0 >= 2000 * 100 / 250
    # The night of the first signal after the drop it warns, and for `hold` evenings; then it is quiet
    # until the chart (restarted at 0) signals again.
    _, signals = cusum.run(cusum.design(0.60, 0.50, 2000), ~hits)
    first = next(i for i in signals if i >= 200)
    for end, warned in ((first, True), (first + settings.hold - 1, True), (first + settings.hold, False)):
        acc = decay.charts_for(_promise(), hits[: end + 1], up[: end + 1], days[: end + 1], settings)[0]
        assert acc.alarm is warned and acc.last_signal == days[first], end


def test_the_always_up_chart_fires_when_the_model_stops_winning_the_disagreements():
    # Accuracy unchanged in level, but on the evenings it disagrees with always-up it now loses 3 in 4.
    rng = np.random.default_rng(7)
    n = 600
    up = rng.random(n) < 0.55
    disagree = rng.random(n) < 0.4
    win = rng.random(n) < np.where(np.arange(n) < 200, 0.6, 0.25)
    # Agreeing evenings: both right or both wrong. Disagreeing ones: exactly one of the two is right.
    up = np.where(disagree, ~win, up)
    hits = np.where(disagree, win, up)
    charts = decay.charts_for(_promise(acc=0.50), hits, up, evenings(n), DecaySettings())
    vs_up = next(c for c in charts if c.name == "vs_always_up")
    assert vs_up.trials == int(disagree.sum()) and vs_up.signals >= 1
    assert vs_up.last_signal >= evenings(n)[200]


def test_a_promise_too_low_for_the_drop_leaves_only_the_always_up_chart():
    t = decay.TickerDecay("X", 1, "v1", _promise(acc=0.08), n=3, hits=1, up_hits=2)
    t.charts = decay.charts_for(
        t.promise, [True, False, False], [True, True, False], evenings(3), DecaySettings()
    )
    assert [c.name for c in t.charts] == ["vs_always_up"] and "vs always-up 0." in t.describe()
    assert t.row()["cusum"] is None and t.row()["cusum_vs_up"] is not None


def test_no_room_for_the_drop_means_no_accuracy_chart():
    charts = decay.charts_for(
        _promise(acc=0.10, model_only=None, up_only=None), [True], [True], evenings(1), DecaySettings()
    )
    assert charts == []


def test_psi_against_a_hand_computed_case():
    reference = np.arange(1000.0)  # deciles: edges 99.9, 199.8, ...
    assert drift.psi(reference, reference) == pytest.approx(0.0)
    # 20 recent values: 3, 3, 2, 2, 2, 2, 2, 2, 1, 1 per decile -> shares .15 .15 .1 x6 .05 .05:
    # PSI = 2 (.05 ln 1.5) + 2 (-.05 ln .5) = 0.1 ln 3.
    counts = [3, 3, 2, 2, 2, 2, 2, 2, 1, 1]
    recent = np.concatenate([np.full(c, 50.0 + 100 * i) for i, c in enumerate(counts)])
    assert drift.psi(reference, recent) == pytest.approx(0.1 * math.log(3), rel=1e-12)
    # All recent values beyond the training range: one bin at share 1, the others floored at 1e-4.
    far = drift.psi(reference, np.full(30, 5000.0))
    eps = drift.EPSILON
    assert far == pytest.approx(9 * (eps - 0.1) * math.log(eps / 0.1) + (1 - 0.1) * math.log(1 / 0.1))
    assert [drift.band(x) for x in (0.05, 0.1, 0.2, 0.25, float("nan"))] == [
        "stable",
        "moderate",
        "moderate",
        "significant",
        "unknown",
    ]


def test_unusual_drift_is_judged_against_limits_simulated_from_the_training_window():
    rng = np.random.default_rng(3)
    reference = pd.DataFrame({"f": rng.standard_normal(500), "g": rng.standard_normal(500)})
    recent = pd.DataFrame({"f": rng.standard_normal(63), "g": rng.standard_normal(63) + 3.0})
    fd = drift.feature_drift("X", reference, recent)
    assert set(fd.limits) == {"f", "g"} and all(0 < v < 5 for v in fd.limits.values())
    assert fd.unusual == ["g"] and fd.max_feature == "g"
    assert fd.describe().startswith("X: inputs beyond what unchanged inputs show (family 5%): g; largest PSI")
    # An unchanged ticker whose largest PSI the usual bands call "significant" (persistent inputs do that)
    # is said to have none unusual, without the band's word (issue 62: every ridge champion read so).
    again = drift.feature_drift("X", reference, recent.assign(g=rng.standard_normal(63)))
    calm = drift.FeatureDrift("X", {"f": 3.5}, 750, 63, limits={"f": 8.3})
    assert calm.band == "significant" and "significant" not in calm.describe()
    assert calm.describe().startswith("X: inputs beyond what unchanged inputs show (family 5%): none;")
    # A function of the reference and the recent window's length only, and reproducible.
    assert again.limits == fd.limits and again.unusual == []
    # Too short a reference for the simulation: PSI alone, nothing called unusual.
    short = drift.feature_drift("X", reference.iloc[: drift.MIN_REFERENCE - 1], recent)
    assert short.values and short.limits == {} and short.unusual == []


def test_model_inputs_are_the_window_normalised_newest_row():
    frame = pd.DataFrame({"close": [1.0, 2.0, 3.0, 2.0, 2.0, 2.0]})
    out = drift.model_inputs(frame, window=3)
    assert out["close"].tolist() == [1.0, 0.0, 0.0, 0.0]  # flat window: 0 (SPEC §4)
    long = pd.DataFrame({"close": np.arange(30.0)})
    fd = drift.feature_drift("X", long, long.iloc[:2], min_recent=5)
    assert fd.values == {} and "need 5" in fd.reason and fd.band == "unknown"


def test_reader_scores_the_active_models_own_out_of_sample_rows(engine, db_url, tmp_path):
    settings = make_settings(tmp_path, db_url)
    ingest(engine, ["AAPL", "MSFT"], start="2022-01-03", end="2024-09-30")
    decaying = planted_model(engine, settings, "AAPL", seed=0)
    stable = planted_model(engine, settings, "MSFT", seed=1)
    bad_rows = planted_record(engine, "AAPL", decaying, n=400, decay_at=200, seed=1)
    planted_record(engine, "MSFT", stable, n=400, seed=2)

    report = decay.check(engine, ["AAPL", "MSFT"], DecaySettings())
    by = {t.ticker: t for t in report.tickers}
    assert [t.ticker for t in report.decaying] == ["AAPL"]
    aapl = by["AAPL"]
    scored = [r for r in bad_rows if r["model_status"] == "active" and not r["in_sample"]]
    assert aapl.n == len(scored) > 200  # in-sample replays and its candidate-era rows left out
    assert aapl.hits == sum(r["next_day_direction_correct"] for r in scored)
    assert aapl.promise.source == "gate decision" and aapl.promise.accuracy == pytest.approx(0.60)
    assert aapl.promise.promised == pytest.approx(PLANTED_PROMISE.promised)
    assert aapl.promise.promised < 0.55  # shrunk for the gate's selection
    acc = aapl.chart("accuracy")
    assert acc.alarm and acc.last_signal == aapl.last_evening >= evenings(400)[200]
    assert not by["MSFT"].decaying
    # Drift beside it: the 63 sessions after the data cutoff (2023-01-31) against those up to it.
    assert aapl.drift.recent_rows == 63 and len(aapl.drift.values) == 11
    assert aapl.drift.max_feature in aapl.drift.values and aapl.drift.band != "unknown"
    row = aapl.row()
    assert row["live_n"] == aapl.n and row["decaying"]
    assert row["promised_accuracy"] == pytest.approx(PLANTED_PROMISE.promised)
    assert row["backtest_accuracy"] == pytest.approx(0.60)
    assert "AAPL" in report.summary() and "MSFT" not in report.summary()
    assert report.payload()["decaying"] == ["AAPL"]
    # What to expect with no decay at all: 2 tickers x 252 sessions a year / ARL0 1000 sessions.
    assert "about 0.5 false alarms a year across these 2 tickers" in report.summary()
    assert report.payload()["expected_false_alarms_a_year"] == pytest.approx(2 * 252 / 1000)


def test_a_ticker_without_an_active_model_is_not_checked(engine, db_url, tmp_path):
    from accountability_helpers import make_model

    settings = make_settings(tmp_path, db_url)
    make_model(engine, settings, "GEHC")
    report = decay.check(engine, ["GEHC"], DecaySettings())
    assert report.tickers == [] and report.without_active == ["GEHC"]
    assert "No decay" in report.summary()


def test_the_selection_prior_is_read_once_per_check_not_per_ticker(engine, db_url, tmp_path, monkeypatch):
    """Every stored backtest is read and fitted for the prior: once for the whole report (it was once per
    ticker), and each ticker's expected accuracy is the one a lone reader gives."""
    from ldtm_core.accountability.decay import record as decay_record

    settings = make_settings(tmp_path, db_url)
    for i, t in enumerate(("AAPL", "NVDA")):
        planted_record(engine, t, planted_model(engine, settings, t, seed=i), seed=i + 1)
    alone = {
        t.ticker: t.row()["expected_accuracy"] for t in decay.check(engine, None, DecaySettings()).tickers
    }
    calls = []
    real = decay_record.prior_of

    def counted(engine):
        calls.append(1)
        return real(engine)

    monkeypatch.setattr(decay_record, "prior_of", counted)
    monkeypatch.setattr(decay, "prior_of", counted)
    report = decay.check(engine, None, DecaySettings())
    assert len(report.tickers) == 2 and len(calls) == 1
    assert {t.ticker: t.row()["expected_accuracy"] for t in report.tickers} == alone
    assert all(v is not None for v in alone.values())


def test_cli_decay_names_the_decaying_ticker(ldtm_env, tmp_path):
    from typer.testing import CliRunner

    from ldtm_core.cli import app
    from ldtm_core.db import get_engine

    engine = get_engine(ldtm_env["url"])
    settings = make_settings(tmp_path, ldtm_env["url"])
    planted_record(engine, "AAPL", planted_model(engine, settings, "AAPL", seed=0), decay_at=200, seed=1)
    planted_record(engine, "NVDA", planted_model(engine, settings, "NVDA", seed=1), seed=2)
    out = CliRunner().invoke(app, ["decay"], env={"COLUMNS": "200"})
    assert out.exit_code == 0, out.output
    assert "DECAYING" in out.output and "Decay in 1 of 2 active models" in out.output
    # The promise the chart ran against beside the backtest's own figure, and why they differ.
    assert "53.9%" in out.output and "60.0%" in out.output and "which overstates a model" in out.output
    said = " ".join(out.output.split())
    assert (
        said.count("Drift: PSI compares where each input sits") == 1 and "it cannot see a price level" in said
    )
    only = CliRunner().invoke(app, ["decay", "--ticker", "NVDA"], env={"COLUMNS": "200"})
    assert only.exit_code == 0 and "No decay: 1 active model checked" in only.output


def test_a_model_promoted_after_its_shadow_evenings_keeps_the_promise_of_its_gate_backtest(
    engine, db_url, tmp_path
):
    """The shadow conclusion records a passed decision too (backtest_id 'shadow-<id>', no folds): the
    promise is still the backtest the gate passed, not "no promise"."""
    import datetime as dt

    from sqlalchemy import insert

    from ldtm_core.learning import registry
    from ldtm_core.schema import gate_decisions

    settings = make_settings(tmp_path, db_url)
    ingest(engine, ["AAPL"], start="2022-01-03", end="2024-09-30")
    model_id = planted_model(engine, settings, "AAPL", seed=0)
    with engine.begin() as conn:
        conn.execute(
            insert(gate_decisions).values(
                backtest_id=f"shadow-{model_id}",
                model_id=model_id,
                ticker="AAPL",
                passed=True,
                decided_at=dt.datetime.now(dt.UTC),
            )
        )
    promise = decay.promise_of(engine, registry.get_model(engine, model_id))
    assert promise is not None and promise.source == "gate decision"
    assert promise.accuracy == pytest.approx(0.60) and not promise.backtest_id.startswith("shadow-")
