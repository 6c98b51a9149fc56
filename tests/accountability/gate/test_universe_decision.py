"""The universe policy: a global recipe's candidates are decided by one universe verdict applied to every
member ticker (issue 59): its first deployment against every baseline (an intersection-union test whose
false rate and power are simulated here), a challenge against the champions, each ticker's report
showing its own figures beside the verdict it cites."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from accountability_helpers import ingest, make_settings
from sqlalchemy import func, select

from ldtm_core.accountability.gate.backtest_pool import backtest_candidate
from ldtm_core.accountability.gate.gate import run_gate
from ldtm_core.accountability.gate.policy import UNIVERSE_POLICY, GateThresholds
from ldtm_core.accountability.gate.sim import universe_rows
from ldtm_core.accountability.gate.universe import BETTER, NOT_SHOWN
from ldtm_core.accountability.gate.universe_decision import BASELINES, CHAMPIONS, against_every, decide
from ldtm_core.errors import InputError
from ldtm_core.learning.recipes import global_fit, serving
from ldtm_core.learning.registry import active_model
from ldtm_core.schema import universe_trials

LEVEL = 0.05


def _against_two_baselines(rng, edge: float):
    """The challenger's hits and two independent coin baselines', one market per evening."""
    a, b1, evening = universe_rows(rng, 150, 40, edge=edge)
    b2 = rng.random(len(a)) < 0.5
    return a, {"one": b1.astype(float), "two": b2.astype(float)}, evening


def test_a_first_deployment_with_no_skill_is_passed_at_most_at_the_level():
    rng = np.random.default_rng(5)
    passed = [against_every(*_against_two_baselines(rng, 0.0), LEVEL)[0] == BETTER for _ in range(300)]
    assert np.mean(passed) <= LEVEL + 0.02  # the family errs at most at the level (300 draws)


def test_a_planted_edge_over_every_baseline_is_found():
    rng = np.random.default_rng(6)
    passed = [against_every(*_against_two_baselines(rng, 0.08), LEVEL)[0] == BETTER for _ in range(200)]
    assert np.mean(passed) >= 0.8


def test_better_than_one_baseline_only_is_not_better():
    rng = np.random.default_rng(7)
    a, bases, evening = _against_two_baselines(rng, 0.1)
    bases["oracle"] = np.ones(len(a))  # always right: nobody is better than it
    decision, figures = against_every(a, bases, evening, LEVEL)
    assert decision == NOT_SHOWN and figures["one"].p_value <= LEVEL


# --- on stored folds ----------------------------------------------------------------------------------

TICKERS = ["AAPL", "MSFT", "NVDA"]
PERMISSIVE = GateThresholds(min_rows=10, min_fold_rows=5)


@pytest.fixture
def store(engine, tmp_path, db_url):
    ingest(engine, TICKERS)
    serving.clear_cache()
    torch.manual_seed(0)
    settings = make_settings(tmp_path, db_url)
    for o in global_fit.train_global(engine, settings, "ridge", TICKERS):
        assert backtest_candidate(engine, o.ticker, None, 1, settings=settings, folds=2).status == "ok"
    return engine, settings


def _count(engine) -> int:
    with engine.connect() as conn:
        return conn.execute(select(func.count()).select_from(universe_trials)).scalar_one()


def test_a_first_deployment_is_one_verdict_against_the_baselines_applied_to_every_member(store):
    engine, settings = store
    d = decide(engine, settings, "ridge", [*TICKERS, "TSLA"], thresholds=PERMISSIVE)

    assert list(d.verdicts) == [BASELINES] and d.skipped == {"TSLA": "no candidate of recipe ridge"}
    v = d.verdicts[BASELINES]
    assert v.tickers == 3 and "first deployment" in v.note and "clustered by evening" in v.summary()
    assert sorted(d.reports) == TICKERS
    for t, report in d.reports.items():  # one decision for the universe, each ticker's evidence beside it
        assert report.policy == UNIVERSE_POLICY and report.passed == (v.decision == BETTER)
        assert f"universe verdict on recipe ridge: {v.decision}" in report.summary()
        assert any(c.name.startswith("own direction_accuracy") for c in report.criteria)
        assert (active_model(engine, t) is not None) == (v.decision == BETTER)
    assert _count(engine) == (0 if v.decision not in (BETTER, NOT_SHOWN) else 1)

    again = decide(engine, settings, "ridge", TICKERS, thresholds=PERMISSIVE)
    assert not again.reports and all("already judged" in why for why in again.skipped.values())
    assert _count(engine) <= 1  # the same evidence is one trial


def test_a_challenge_of_the_champions_is_decided_by_the_verdict_against_them(store):
    engine, settings = store
    anyone = GateThresholds(policy="seed", min_direction_accuracy=0.0, max_mean_abs_pct_error=100.0)
    for t in TICKERS:  # ridge serves (promoted per ticker, as before this policy)
        assert run_gate(engine, settings, t, thresholds=anyone).passed
    global_fit.train_global(engine, settings, "lightgbm", TICKERS, overrides={"n_estimators": 30})
    for t in TICKERS:
        assert backtest_candidate(engine, t, None, 1, settings=settings, folds=2).status == "ok"

    d = decide(engine, settings, "lightgbm", TICKERS, thresholds=PERMISSIVE)

    v = d.verdicts[CHAMPIONS]
    assert list(d.verdicts) == [CHAMPIONS] and v.against == "the champions'" and v.tickers == 3
    for t, report in d.reports.items():
        assert report.passed == (v.decision == BETTER)
        assert active_model(engine, t).recipe == ("lightgbm" if v.decision == BETTER else "ridge")


def test_a_per_ticker_recipe_is_refused_by_the_universe_decision(store):
    engine, settings = store
    with pytest.raises(InputError, match="recipe lstm is fitted per ticker"):
        decide(engine, settings, "lstm", TICKERS)


def test_the_cli_decides_a_recipe_for_the_universe(store, monkeypatch):
    from typer.testing import CliRunner

    from ldtm_core.cli import app

    engine, settings = store
    monkeypatch.setenv("LDTM_HOME", str(settings.home))
    monkeypatch.setenv("LDTM_DATABASE_URL", settings.database_url)
    monkeypatch.setenv("LDTM_UNIVERSE", ",".join(TICKERS))
    monkeypatch.setenv("LDTM_GATE_MIN_ROWS", "10")
    monkeypatch.setenv("LDTM_GATE_MIN_FOLD_ROWS", "5")
    out = CliRunner().invoke(app, ["universe", "decide", "--recipe", "ridge"])
    assert out.exit_code == 0, out.output
    text = " ".join(out.output.split())
    assert "universe verdict on recipe ridge" in text and "first deployment" in text
    assert "universe decision: ridge" in text and all(t in out.output for t in TICKERS)
    assert "promoted:" in text


def test_the_per_ticker_gate_refuses_a_global_candidate_unless_told_to_judge_it_alone(store, monkeypatch):
    from typer.testing import CliRunner

    from ldtm_core.cli import app

    engine, settings = store
    monkeypatch.setenv("LDTM_HOME", str(settings.home))
    monkeypatch.setenv("LDTM_DATABASE_URL", settings.database_url)
    refused = CliRunner().invoke(app, ["gate", "--ticker", "AAPL"])
    assert refused.exit_code != 0
    said = " ".join(refused.output.split())
    assert "is a ridge candidate: a global recipe is decided once for the universe" in said
    assert "ldtm universe decide --recipe ridge" in said
    alone = CliRunner().invoke(app, ["gate", "--ticker", "AAPL", "--alone", "--policy", "seed"])
    assert "gate " in alone.output and "recipe ridge, seed policy" in " ".join(alone.output.split()), (
        alone.output
    )
