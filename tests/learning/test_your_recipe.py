"""Your own model in one file: a recipe defined here, registered with one line, runs through train ->
backtest -> gate -> predict -> fillback -> board -> signals like the built-in ones; and a recipe that
fails (fit, predictions, artifact) is refused by name with nothing written, the others unharmed."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pytest
from accountability_helpers import ingest, make_model, make_settings
from sqlalchemy import func, select
from typer.testing import CliRunner

from ldtm_core.accountability.board.leaderboard import leaderboard
from ldtm_core.accountability.gate.backtest_pool import backtest_candidate
from ldtm_core.accountability.gate.gate import run_gate
from ldtm_core.accountability.gate.policy import GateThresholds
from ldtm_core.accountability.ledger.audit import verify
from ldtm_core.accountability.ledger.fillback import fillback
from ldtm_core.accountability.ledger.snapshots import predict
from ldtm_core.accountability.signals.signals import signal_report
from ldtm_core.cli import app
from ldtm_core.data import price_features
from ldtm_core.data.calendar import session_array
from ldtm_core.learning.recipes import RECIPES, Recipe, global_fit, serving
from ldtm_core.learning.recipes.family import Family, RecipeConfig
from ldtm_core.learning.registry import active_model, list_models
from ldtm_core.schema import backtest_fold_results, model_registry, snapshots

# --- the recipe: everything a user writes ---------------------------------------------------------------


@dataclass(frozen=True)
class MomentumConfig(RecipeConfig):
    kind: str = "momentum"
    feature: str = "ret_20"  # the one price feature it reads
    shrink: float = 0.5  # how much of the fitted slope it trusts


def _fit(x: np.ndarray, y: np.ndarray, cfg: MomentumConfig) -> dict:
    j = price_features.feature_names().index(cfg.feature)
    slope, intercept = np.polyfit(x[:, j], y, 1)  # one least-squares line per horizon
    return {"slope": slope * cfg.shrink, "intercept": intercept}


def _predict(state: dict, x: np.ndarray, cfg: MomentumConfig) -> np.ndarray:
    j = price_features.feature_names().index(cfg.feature)
    return state["intercept"] + np.outer(x[:, j], state["slope"])


FAMILY = Family(
    MomentumConfig,
    _fit,
    _predict,
    dump=lambda state: {k: v.tolist() for k, v in state.items()},
    load=lambda data, cfg, n: {k: np.asarray(v, float) for k, v in data.items()},
)
# The registration line (in recipes.RECIPES for a recipe of your own package).
REGISTRATION = Recipe("momentum", "global", "one feature's least-squares line", f"{__name__}:FAMILY")

# --- the test -----------------------------------------------------------------------------------------

TICKERS = ["AAPL", "MSFT", "NVDA"]
ANY = GateThresholds(policy="seed", min_direction_accuracy=0.0, max_mean_abs_pct_error=100.0)


@pytest.fixture
def store(engine, tmp_path, db_url, monkeypatch):
    monkeypatch.setitem(RECIPES, "momentum", REGISTRATION)
    ingest(engine, TICKERS)
    serving.clear_cache()
    return engine, make_settings(tmp_path, db_url)


def _count(engine, table) -> int:
    with engine.connect() as conn:
        return conn.execute(select(func.count()).select_from(table)).scalar_one()


def test_a_recipe_of_your_own_runs_through_every_step_of_the_record(store, monkeypatch, tmp_path, db_url):
    engine, settings = store
    monkeypatch.setenv("LDTM_HOME", str(settings.home))
    monkeypatch.setenv("LDTM_DATABASE_URL", db_url)
    monkeypatch.setenv("LDTM_UNIVERSE", ",".join(TICKERS))
    trained = CliRunner().invoke(
        app,
        ["train", "--tickers", "all", "--recipe", "momentum", "--set", "shrink=0.8", "--as-of", "2024-03-28"],
    )
    assert trained.exit_code == 0, trained.output
    models = list_models(engine)
    assert {m.recipe for m in models} == {"momentum"} and len(models) == 3
    assert all('"shrink": 0.8' in m.config_json for m in models)

    for t in TICKERS:
        assert backtest_candidate(engine, t, None, 1, settings=settings, folds=2).status == "ok"
        assert run_gate(engine, settings, t, thresholds=ANY).passed
        assert active_model(engine, t).recipe == "momentum"

    days = session_array()
    evenings = days[(days >= np.datetime64("2024-04-01")) & (days <= np.datetime64("2024-06-27"))]
    for day in evenings:
        result = predict(engine, settings, run_date=pd.Timestamp(day).date(), mode="replay")
        assert result.tickers_predicted == TICKERS, result.skipped
    fillback(engine)

    board = leaderboard(engine).set_index("ticker")
    assert (board.loc[TICKERS, "n"] > 0).all()  # the active (gated) rows: the default board shows no other
    report = signal_report(engine)
    assert len(report.evenings) > 0 and report.rows_used > 0 and sorted(report.universe) == TICKERS
    assert verify(engine).ok


def _train(engine, settings):
    return global_fit.train_global(engine, settings, "momentum", TICKERS, as_of=dt.date(2024, 3, 28))


@pytest.mark.parametrize(
    ("fault", "message"),
    [
        ("fit raises", "recipe momentum: ZeroDivisionError"),
        ("predicts NaN", "momentum predicted"),
        ("wrong shape", "momentum predicted shape"),
        ("dumps code", "recipe momentum: TypeError"),
    ],
)
def test_a_recipe_that_fails_is_refused_by_name_with_nothing_written(store, monkeypatch, fault, message):
    engine, settings = store
    broken = {
        "fit raises": {"fit": lambda x, y, cfg: 1 / 0},
        "predicts NaN": {"predict": lambda s, x, cfg: np.full((len(x), 3), np.nan)},
        "wrong shape": {"predict": lambda s, x, cfg: np.zeros((len(x), 2))},
        "dumps code": {"dump": lambda state: {"call": print}},
    }[fault]
    monkeypatch.setattr(f"{__name__}.FAMILY", Family(**{**FAMILY.__dict__, **broken}))

    outcomes = _train(engine, settings)

    assert {o.status for o in outcomes} == {"failed"}
    assert all(message in o.reason for o in outcomes), outcomes[0].reason
    assert _count(engine, model_registry) == 0
    assert not list(settings.checkpoint_dir.rglob("*.json"))


def test_an_artifact_that_no_longer_loads_costs_only_its_own_tickers(store, monkeypatch, db_url):
    engine, settings = store
    _train(engine, settings)
    make_model(engine, settings, "NVDA", trained_on=dt.date(2024, 3, 28))  # an LSTM beside them, newer
    serving.clear_cache()

    def refuse(data, cfg, n):
        raise ValueError("slope of the wrong length")

    monkeypatch.setattr(f"{__name__}.FAMILY", Family(**{**FAMILY.__dict__, "load": refuse}))
    result = predict(engine, settings, run_date=dt.date(2024, 4, 2), mode="replay")

    assert result.tickers_predicted == ["NVDA"]
    for t in ("AAPL", "MSFT"):
        assert "recipe momentum" in result.skipped[t] and "slope of the wrong length" in result.skipped[t]
    assert result.failed == {t: result.skipped[t] for t in ("AAPL", "MSFT")}  # the model, not the data
    with engine.connect() as conn:
        assert set(conn.execute(select(snapshots.c.ticker)).scalars()) == {"NVDA"}
    assert _count(engine, backtest_fold_results) == 0

    # At the command line the evening is partial: its rows are written, and the exit status says so.
    for name, value in (("LDTM_HOME", str(settings.home)), ("LDTM_DATABASE_URL", db_url)):
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("LDTM_UNIVERSE", ",".join(TICKERS))
    cli = CliRunner().invoke(app, ["predict", "--run-date", "2024-04-03", "--mode", "replay"])
    assert cli.exit_code == 1, cli.output
    assert (
        "1 rows written" in cli.output
        and "partial: 2 ticker(s) not served because their model failed" in cli.output
    )
    assert "(AAPL, MSFT)" in cli.output and "Traceback" not in cli.output


# --- budgets: a fit that runs too long or asks for too much memory ------------------------------------


def _sleepy_fit(x, y, cfg):
    import time

    time.sleep(120)


def _greedy_fit(x, y, cfg):
    return {"ballast": np.ones(1 << 33)}  # 64 GiB


SLEEPY = Family(MomentumConfig, _sleepy_fit, _predict, FAMILY.dump, FAMILY.load)
GREEDY = Family(MomentumConfig, _greedy_fit, _predict, FAMILY.dump, FAMILY.load)


@pytest.mark.parametrize(
    ("family", "setting", "value", "message"),
    [
        ("SLEEPY", "LDTM_RECIPE_FIT_TIMEOUT_S", "3", "the fit exceeded its time budget of 3 s"),
        ("GREEDY", "LDTM_RECIPE_FIT_MEMORY_MIB", "4096", "the fit exceeded its memory budget of 4096 MiB"),
    ],
)
def test_a_fit_over_its_budget_is_refused_by_name_and_writes_nothing(
    store, monkeypatch, family, setting, value, message
):
    import time

    engine, settings = store
    monkeypatch.setitem(RECIPES, "momentum", Recipe("momentum", "global", "", f"{__name__}:{family}"))
    monkeypatch.setenv(setting, value)
    t0 = time.perf_counter()
    outcomes = _train(engine, settings)

    assert time.perf_counter() - t0 < 60  # the sleeper was stopped, not waited for
    assert {o.status for o in outcomes} == {"failed"}
    assert all(f"recipe momentum: {message}" in o.reason for o in outcomes), outcomes[0].reason
    assert all(o.reason.count("recipe momentum:") == 1 for o in outcomes), outcomes[0].reason  # said twice
    assert _count(engine, model_registry) == 0 and not list(settings.checkpoint_dir.rglob("*.json"))


def test_within_its_budget_a_fit_in_a_child_gives_the_same_model(store, monkeypatch):
    engine, settings = store
    monkeypatch.setenv("LDTM_RECIPE_FIT_TIMEOUT_S", "120")
    monkeypatch.setenv("LDTM_RECIPE_FIT_MEMORY_MIB", "8192")
    in_child = _train(engine, settings)
    monkeypatch.setenv("LDTM_RECIPE_FIT_TIMEOUT_S", "0")  # no limit at all: in-process
    monkeypatch.delenv("LDTM_RECIPE_FIT_MEMORY_MIB")
    in_process = _train(engine, settings)

    shas = {o.ticker: get_model_sha(engine, o.model_id) for o in in_child}
    assert {o.status for o in in_child + in_process} == {"trained"}
    assert shas == {o.ticker: get_model_sha(engine, o.model_id) for o in in_process}  # byte for byte


def get_model_sha(engine, model_id: int) -> str:
    from ldtm_core.learning.registry import get_model

    return get_model(engine, model_id).checkpoint_sha256


def test_by_default_a_fit_has_an_hour_in_a_child_and_0_means_in_process(monkeypatch):
    from ldtm_core.learning.recipes.budget import FitBudget

    monkeypatch.delenv("LDTM_RECIPE_FIT_TIMEOUT_S")  # the suite fits in-process (tests/conftest.py)
    assert FitBudget.from_env() == FitBudget(timeout_s=3600.0) and FitBudget.from_env().limited
    monkeypatch.setenv("LDTM_RECIPE_FIT_TIMEOUT_S", "0")
    assert not FitBudget.from_env().limited
