"""The universe verdict on a recipe change: its false rate with no difference when every ticker shares
the day's market (and the row-count test's, which it replaces), its power on a planted edge, and the
verdict run on stored folds: a global recipe against the champions, recorded once in its ledger."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from accountability_helpers import ingest, make_settings
from scipy.stats import binomtest
from sqlalchemy import func, select

from ldtm_core.accountability.gate.backtest_pool import backtest_candidate
from ldtm_core.accountability.gate.gate import run_gate
from ldtm_core.accountability.gate.policy import GateThresholds
from ldtm_core.accountability.gate.sim import universe_rows
from ldtm_core.accountability.gate.universe import MIN_EVENINGS, clustered, universe_verdict
from ldtm_core.learning.recipes import global_fit, serving
from ldtm_core.schema import universe_trials

LEVEL = 0.05


def test_no_difference_is_claimed_at_the_level_though_rows_move_together():
    rng = np.random.default_rng(0)
    p_clustered, p_rows = [], []
    for _ in range(300):
        a, b, evening = universe_rows(rng, 120, 40, edge=0.0)
        p_clustered.append(clustered(a, b, evening, LEVEL).p_value)
        # The test that counts rows as independent (an exact McNemar on the disagreements).
        only_a, only_b = int((a & ~b).sum()), int((b & ~a).sum())
        p_rows.append(binomtest(only_a, only_a + only_b, 0.5, alternative="greater").pvalue)
    false_clustered = np.mean(np.array(p_clustered) <= LEVEL)
    false_rows = np.mean(np.array(p_rows) <= LEVEL)
    assert false_clustered <= LEVEL + 0.03  # 300 draws: 0.08 is 2.4 SEs above 0.05
    assert false_rows > 3 * LEVEL  # the rows of one day are one draw of the market, not 40


def test_a_planted_edge_is_found_and_the_detectable_difference_says_how_small():
    rng = np.random.default_rng(1)
    found, detectable = [], []
    for _ in range(200):
        a, b, evening = universe_rows(rng, 250, 60, edge=0.06)
        f = clustered(a, b, evening, LEVEL)
        found.append(f.p_value <= LEVEL)
        detectable.append(f.detectable)
    assert np.mean(found) >= 0.8
    # The stated detectable difference is the one found with 80 % power: the planted 6 points is above it.
    assert np.median(detectable) < 0.06


def test_too_few_evenings_is_insufficient_not_a_verdict():
    a = np.array([True, False] * 50)
    f = clustered(a, ~a, np.arange(100) % (MIN_EVENINGS - 1), LEVEL)
    assert np.isnan(f.p_value) and f.evenings == MIN_EVENINGS - 1


# --- on stored folds ----------------------------------------------------------------------------------

TICKERS = ["AAPL", "MSFT", "NVDA"]
ANY = GateThresholds(policy="seed", min_direction_accuracy=0.0, max_mean_abs_pct_error=100.0)


@pytest.fixture
def champions(engine, tmp_path, db_url):
    """Ridge serving every ticker, and a LightGBM candidate of the same universe backtested."""
    ingest(engine, TICKERS)
    serving.clear_cache()
    torch.manual_seed(0)
    settings = make_settings(tmp_path, db_url)
    for o in global_fit.train_global(engine, settings, "ridge", TICKERS):
        backtest_candidate(engine, o.ticker, None, 1, settings=settings, folds=2)
        assert run_gate(engine, settings, o.ticker, thresholds=ANY).passed
    global_fit.train_global(engine, settings, "lightgbm", TICKERS, overrides={"n_estimators": 30})
    for t in TICKERS:
        assert backtest_candidate(engine, t, None, 1, settings=settings, folds=2).status == "ok"
    return engine, settings


def test_the_universe_verdict_pairs_every_tickers_folds_and_is_recorded_once(champions):
    engine, settings = champions
    v = universe_verdict(engine, settings, "lightgbm", TICKERS)

    assert v.tickers == 3 and not v.skipped and v.trials == 1
    assert v.figures.rows == v.per_ticker["rows"].sum() and v.figures.evenings >= MIN_EVENINGS
    assert set(v.per_ticker["champion_recipe"]) == {"ridge"}
    weighted = (v.per_ticker["rows"] * v.per_ticker["challenger_accuracy"]).sum() / v.figures.rows
    assert v.figures.challenger_accuracy == pytest.approx(weighted)
    assert v.recorded and "clustered by evening" in v.summary()

    # Another recipe fitted since: the verdict still reads the newest candidate of the recipe named.
    global_fit.train_global(engine, settings, "ridge", TICKERS, overrides={"alpha": 3.0})
    again = universe_verdict(engine, settings, "lightgbm", [*TICKERS, "TSLA"])
    assert again.skipped == {"TSLA": "no candidate of recipe lightgbm"} and again.tickers == 3
    assert not again.recorded and again.trials == 1  # the same evidence judged again counts once
    with engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(universe_trials)).scalar_one() == 1


def test_a_second_recipe_on_the_same_folds_is_judged_at_a_smaller_level(champions):
    engine, settings = champions
    first = universe_verdict(engine, settings, "lightgbm", TICKERS)
    global_fit.train_global(engine, settings, "lightgbm", TICKERS, overrides={"n_estimators": 31})
    for t in TICKERS:
        backtest_candidate(engine, t, None, 1, settings=settings, folds=2)

    second = universe_verdict(engine, settings, "lightgbm", TICKERS)

    assert second.trials == 2 and second.alpha_adjusted < first.alpha_adjusted


def test_the_cli_prints_the_verdict_and_refuses_a_bad_level(champions, monkeypatch):
    from typer.testing import CliRunner

    from ldtm_core.cli import app

    engine, settings = champions
    monkeypatch.setenv("LDTM_HOME", str(settings.home))
    monkeypatch.setenv("LDTM_DATABASE_URL", settings.database_url)
    monkeypatch.setenv("LDTM_UNIVERSE", ",".join(TICKERS))
    monkeypatch.setenv("COLUMNS", "200")
    out = CliRunner().invoke(app, ["universe", "verdict", "--recipe", "lightgbm", "--dry-run"])
    assert out.exit_code == 0, out.output
    text = " ".join(out.output.split())
    assert "universe verdict on recipe lightgbm" in text and "clustered by evening" in text
    assert all(t in out.output for t in TICKERS)
    with engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(universe_trials)).scalar_one() == 0
    bad = CliRunner().invoke(app, ["universe", "verdict", "--recipe", "lightgbm", "--alpha", "2"])
    assert bad.exit_code != 0 and "--alpha must be within (0, 1), not 2.0" in bad.output
