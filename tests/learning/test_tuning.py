"""Hyper-parameter search: trials recorded and reproducible, the hold-out rule, pruning, the shared
study across two processes on PostgreSQL, and the tuned profile feeding training."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import optuna
import pytest
from accountability_helpers import ingest, make_settings
from sqlalchemy import select, text
from sqlalchemy.engine import make_url
from typer.testing import CliRunner

from ldtm_core.cli import app
from ldtm_core.db import get_engine
from ldtm_core.errors import InputError
from ldtm_core.learning import backtest as bt
from ldtm_core.learning import training, training_loop, tuning, tuning_store
from ldtm_core.learning.model import ModelConfig, get_profile
from ldtm_core.migrate import upgrade
from ldtm_core.schema import model_registry

REPO = Path(__file__).resolve().parents[2]
# Demo scale: a one-layer 16-unit LSTM for two epochs; the search still proposes window, dropout,
# lr, batch size and weight decay.
FIXED = {"hidden_size": 16, "num_layers": 1, "head_hidden": 8, "max_epochs": 2, "patience": 2}
FIXED_ARGS = [a for k, v in FIXED.items() for a in ("--set", f"{k}={v}")]
START, END = "2021-01-04", "2023-12-29"


def _drop_studies(url: str) -> None:
    """Studies outlive the PostgreSQL fixture's table truncation: start every test without any."""
    tuning_store._STORAGES.pop(url, None)
    if make_url(url).get_backend_name() == "postgresql":
        with get_engine(url).begin() as conn:
            conn.execute(text(f'DROP SCHEMA IF EXISTS "{tuning_store.OPTUNA_SCHEMA}" CASCADE'))


@pytest.fixture
def studies_url(db_url):
    _drop_studies(db_url)
    yield db_url
    _drop_studies(db_url)


def _tune(settings, tickers=("AAPL",), trials=3, **kw):
    kw.setdefault("fixed", FIXED)
    kw.setdefault("base_profile", "demo")
    return tuning.tune(settings, list(tickers), trials, **kw)


def _params(url: str, name: str) -> list[dict]:
    study = optuna.load_study(study_name=name, storage=tuning_store.get_storage(url))
    return [t.params for t in sorted(study.get_trials(), key=lambda t: t.number)]


def test_search_records_trials_and_a_rerun_proposes_the_same_ones(tmp_path):
    runs = []
    for name in ("one", "two"):
        url = f"sqlite:///{tmp_path / name / 'ldtm.db'}"
        (tmp_path / name).mkdir()
        engine = upgrade(url)
        ingest(engine, ["AAPL"], start=START, end=END)
        result = _tune(make_settings(tmp_path / name, url), trials=3, seed=11)
        assert result.ran == 3 and result.n_trials == 3 and result.study_name == "ldtm:AAPL"
        assert result.n_complete + result.n_pruned == 3 and result.best_value > 0
        # The study lives beside the application database, not in it (Optuna has its own alembic_version).
        assert (tmp_path / name / "ldtm.optuna.db").is_file()
        runs.append(_params(url, "ldtm:AAPL"))
    assert runs[0] == runs[1]
    assert len({json.dumps(p, sort_keys=True) for p in runs[0]}) == 3
    for p in runs[0]:  # the searched fields, within their ranges; fixed fields are not searched
        assert set(p) == {"window", "dropout", "lr", "batch_size", "weight_decay"}
        assert p["window"] in tuning.WINDOWS and p["batch_size"] in tuning.BATCH_SIZES
        assert 1e-4 <= p["lr"] <= 1e-2 and 0.0 <= p["dropout"] <= 0.5


def test_no_trial_sees_a_date_on_or_after_the_backtests_first_cutoff(
    engine, studies_url, tmp_path, monkeypatch
):
    ingest(engine, ["AAPL"], start=START, end=END)
    settings = make_settings(tmp_path, studies_url)
    seen: list[tuple[ModelConfig, object, object]] = []
    real_fit = training_loop.fit

    def spy_fit(train, val, cfg, **kw):
        seen.append((cfg, train, val))
        return real_fit(train, val, cfg, **kw)

    monkeypatch.setattr(training_loop, "fit", spy_fit)
    result = _tune(settings, trials=3, seed=3)
    assert len(seen) == 3
    monkeypatch.setattr(training_loop, "fit", real_fit)

    # The backtest itself, run with each trial's settings, says where its first fold begins.
    def stub_fit(train, val, cfg, **kw):
        return training_loop.FitResult(torch_model(cfg), 0.0, 1, 1, 0.0, "cpu", 0.0)

    monkeypatch.setattr(training_loop, "fit", stub_fit)  # the backtest folds and the candidate each needs
    for cfg, train, val in seen:
        # A backtest needs a candidate of the same settings (the gate trusts only its own config's folds).
        model_id = training.train_ticker(engine, settings, "AAPL", cfg, "reference").model_id
        result_bt = bt.run_backtest(engine, settings, "AAPL", cfg, folds=3, model_id=model_id)
        cutoff = np.datetime64(result_bt.folds[0].window.cutoff, "D")
        for part in (train, val):
            assert len(part) > 0
            assert part.dates.max() < cutoff
            assert part.target_dates.max() < cutoff
        # ... and the purge inside the trial: no training target reaches into validation.
        assert train.target_dates.max() < val.dates.min()
    assert result.holdout["AAPL"] == str(min(cfg_cutoff(engine, settings, w) for w in tuning.WINDOWS))


def torch_model(cfg):
    from ldtm_core.learning.model import LDTM

    return LDTM(cfg).eval()


def cfg_cutoff(engine, settings, window):
    from ldtm_core.data.prices import load_ticker_prices
    from ldtm_core.data.samples import build_samples

    samples = build_samples(load_ticker_prices(engine, "AAPL"), window)
    return tuning.first_backtest_cutoff(samples, 3, None, "AAPL")


def test_pruner_stops_a_trial_at_the_epoch_it_reports(engine, studies_url, tmp_path):
    ingest(engine, ["AAPL"], start=START, end=END)
    settings = make_settings(tmp_path, studies_url)
    # Every reported value is above 0: from epoch 2 on, every trial is pruned.
    pruner = optuna.pruners.ThresholdPruner(upper=0.0, n_warmup_steps=2)
    result = _tune(settings, trials=2, fixed={**FIXED, "max_epochs": 6, "patience": 6}, pruner=pruner)
    assert result.n_pruned == 2 and result.n_complete == 0 and result.best_value is None
    study = tuning_store.load_study(studies_url, "AAPL")
    for t in study.get_trials():
        assert t.state == optuna.trial.TrialState.PRUNED
        assert sorted(t.intermediate_values) == [1, 2]  # stopped at epoch 2 of 6
        assert all(v > 0 for v in t.intermediate_values.values())


def test_two_tune_processes_share_one_study_on_postgres(pg_url, tmp_path):
    _drop_studies(pg_url)
    ingest(get_engine(pg_url), ["AAPL"], start=START, end=END)
    env = {
        **os.environ,
        "LDTM_DATABASE_URL": pg_url,
        "LDTM_HOME": str(tmp_path / "home"),
        "LDTM_UNIVERSE": "demo",
        "COLUMNS": "160",
    }
    cmd = [
        sys.executable,
        "-m",
        "ldtm_core",
        "tune",
        "--tickers",
        "AAPL",
        "--trials",
        "3",
        "--base-profile",
        "demo",
    ]
    procs = [
        subprocess.Popen(
            [*cmd, *FIXED_ARGS],
            env=env,
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for _ in range(2)
    ]
    outputs = [p.communicate(timeout=300)[0] for p in procs]
    for p, out in zip(procs, outputs, strict=True):
        assert p.returncode == 0, out
    study = tuning_store.load_study(pg_url, "AAPL")
    trials = study.get_trials()
    assert len(trials) == 6
    assert sorted(t.number for t in trials) == list(range(6))
    assert len({t._trial_id for t in trials}) == 6
    assert all(t.state.is_finished() for t in trials)
    # Seeded per trial number, the two processes did not propose the same settings twice.
    assert len({json.dumps(t.params, sort_keys=True) for t in trials}) == 6
    # Optuna's tables live in their own schema, not beside the application's.
    with get_engine(pg_url).connect() as conn:
        public = set(
            conn.execute(text("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")).scalars()
        )
    assert "trials" not in public and "studies" not in public
    _drop_studies(pg_url)


def test_tuned_profile_feeds_training_and_the_registry_records_it(ldtm_env, studies_url, tmp_path):
    engine = get_engine(studies_url)
    ingest(engine, ["AAPL", "NVDA"], start=START, end=END)
    settings = make_settings(tmp_path, studies_url)
    result = _tune(settings, trials=2, seed=5)
    best = ModelConfig.from_dict(result.best_config)

    out = CliRunner().invoke(
        app,
        ["train", "--tickers", "AAPL,NVDA", "--profile", "tuned", "--set", "max_epochs=1", "--workers", "1"],
    )
    assert out.exit_code == 0, out.output
    with engine.connect() as conn:
        rows = {r.ticker: r for r in conn.execute(select(model_registry))}
    aapl, nvda = rows["AAPL"], rows["NVDA"]
    assert aapl.profile == "tuned"
    assert ModelConfig.from_dict(json.loads(aapl.config_json)) == ModelConfig.from_dict(
        {**best.to_dict(), "max_epochs": 1}
    )
    metrics = json.loads(aapl.metrics_json)
    assert metrics["tuned_study"] == "ldtm:AAPL" and metrics["tuned_trial"] == result.best_number
    assert metrics["tuning_holdout_cutoff"] == result.holdout["AAPL"]
    # No study for NVDA: it falls back to the reference settings, and says so.
    assert nvda.profile == "reference"
    assert ModelConfig.from_dict(json.loads(nvda.config_json)) == get_profile("reference", max_epochs=1)

    show = CliRunner().invoke(app, ["tune", "show", "AAPL"])
    assert show.exit_code == 0, show.output
    assert f"best trial #{result.best_number}" in show.output and "importance" in show.output


def test_a_second_run_with_other_fixed_settings_is_refused(engine, studies_url, tmp_path):
    ingest(engine, ["AAPL"], start=START, end=END)
    settings = make_settings(tmp_path, studies_url)
    _tune(settings, trials=1)
    with pytest.raises(InputError, match="started with fixed"):
        _tune(settings, trials=1, fixed={**FIXED, "max_epochs": 3})
    assert tuning_store.load_study(studies_url, "AAPL").user_attrs[tuning_store.ATTR_SEED] == 0


def test_a_shared_study_scores_every_ticker_and_tunes_each_without_its_own(sqlite_url, tmp_path):
    ingest(get_engine(sqlite_url), ["AAPL", "NVDA"], start=START, end=END)
    settings = make_settings(tmp_path, sqlite_url)
    result = _tune(settings, tickers=("NVDA", "AAPL"), trials=2, seed=2)
    assert result.study_name == "ldtm:shared:AAPL+NVDA" and set(result.holdout) == {"AAPL", "NVDA"}
    study = tuning_store.load_study(sqlite_url, "NVDA")
    for t in study.get_trials():
        # One value per ticker, the objective their mean; each ticker's epochs are their own pruning steps.
        per_ticker = [t.user_attrs["val_error_AAPL"], t.user_attrs["val_error_NVDA"]]
        assert t.value == pytest.approx(np.mean(per_ticker))
        assert sorted(t.intermediate_values) == [1, 2, 3, 4]
    chosen = tuning_store.ticker_settings(sqlite_url, ["AAPL", "NVDA", "TSLA"], "tuned")
    assert chosen["AAPL"].cfg == chosen["NVDA"].cfg == ModelConfig.from_dict(result.best_config)
    assert chosen["AAPL"].provenance["tuned_study"] == "ldtm:shared:AAPL+NVDA"
    assert chosen["TSLA"].profile == "reference" and chosen["TSLA"].cfg == get_profile("reference")
    tuning_store._STORAGES.pop(sqlite_url, None)


def test_tuning_works_with_the_documented_bare_database_url(studies_url, tmp_path, monkeypatch):
    """`postgresql://` (what the docs and everyone type) must open the study storage with the
    installed driver, like the application database does: tune, tune show and the tuned profile."""
    bare = make_url(studies_url)
    if bare.get_backend_name() == "postgresql":
        bare = bare.set(drivername="postgresql")
    url = bare.render_as_string(hide_password=False)
    monkeypatch.setenv("LDTM_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("LDTM_DATABASE_URL", url)
    ingest(get_engine(url), ["AAPL"], start=START, end=END)
    out = CliRunner().invoke(
        app, ["tune", "--tickers", "AAPL", "--trials", "1", "--base-profile", "demo", *FIXED_ARGS]
    )
    assert out.exit_code == 0, out.output
    show = CliRunner().invoke(app, ["tune", "show", "AAPL"])
    assert show.exit_code == 0, show.output
    assert "best trial #0" in show.output
    chosen = tuning_store.ticker_settings(url, ["AAPL"], "tuned")
    assert chosen["AAPL"].profile == "tuned" and chosen["AAPL"].provenance["tuned_study"] == "ldtm:AAPL"
    tuning_store._STORAGES.pop(url, None)


def test_a_backtest_with_more_folds_than_the_study_counts_the_test_rows_the_study_saw(
    engine, studies_url, tmp_path, monkeypatch
):
    """The study's hold-out is fixed by the fold geometry it was tuned for (3 folds); a backtest with
    8 folds starts earlier, inside the dates the trials used: those test rows are leakage (issue 20 item 5)."""
    import datetime as dt

    from ldtm_core.accountability.gate.gate import run_gate
    from ldtm_core.schema import prices

    ingest(engine, ["AAPL"], start=START, end=END)
    settings = make_settings(tmp_path, studies_url)
    result = _tune(settings, trials=1, seed=1, folds=3)
    holdout = dt.date.fromisoformat(result.holdout["AAPL"])
    with engine.connect() as conn:
        dates = sorted(conn.execute(select(prices.c.date).where(prices.c.ticker == "AAPL")).scalars())
    # The study records the last date its trials used: the session before its hold-out (a one-month target).
    last = max(d for d in dates if d < holdout)
    chosen = tuning_store.ticker_settings(studies_url, ["AAPL"], "tuned")["AAPL"]
    assert chosen.provenance["tuning_last_date"] == last.isoformat()

    def stub_fit(train, val, cfg, **kw):
        return training_loop.FitResult(torch_model(cfg), 0.0, 1, 1, 0.0, "cpu", 0.0)

    monkeypatch.setattr(training_loop, "fit", stub_fit)
    model_id = training.train_ticker(
        engine, settings, "AAPL", chosen.cfg, "tuned", provenance=chosen.provenance
    ).model_id
    same = bt.run_backtest(engine, settings, "AAPL", folds=3, model_id=model_id)
    assert same.leakage_rows == 0 and same.folds[0].window.cutoff >= last
    more = bt.run_backtest(engine, settings, "AAPL", folds=8, model_id=model_id)
    assert more.folds[0].window.cutoff < last
    for f in more.folds:  # every test row dated on or before the study's last date was seen by it
        assert f.window.leakage_rows == sum(
            f.window.test_start <= d <= min(f.window.test_end, last) for d in dates
        ), f
    assert more.leakage_rows > 0 and more.folds[-1].window.leakage_rows == 0
    assert "tuning study ldtm:AAPL" in more.tuning_note and "tuned for 3 folds" in more.tuning_note
    assert "leakage_rows" in {c.name for c in run_gate(engine, settings, "AAPL", model_id=model_id).failing}


def test_ctrl_c_in_tune_says_truly_what_was_kept_without_a_traceback(
    studies_url, tmp_path, monkeypatch, capfd
):
    # Issue 38: Ctrl-C in `ldtm tune` printed Optuna's traceback and recorded a FAIL trial while the
    # message said the one in progress "was not recorded".
    monkeypatch.setenv("LDTM_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("LDTM_DATABASE_URL", studies_url)
    ingest(get_engine(studies_url), ["AAPL"], start=START, end=END)
    real, calls = training_loop.fit, []

    def interrupted_on_the_second(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(training_loop, "fit", interrupted_on_the_second)
    out = CliRunner().invoke(
        app, ["tune", "--tickers", "AAPL", "--trials", "3", "--base-profile", "demo", *FIXED_ARGS]
    )
    captured = capfd.readouterr()
    everything = out.output + captured.out + captured.err
    assert out.exit_code == 130, everything
    assert "Traceback" not in everything and "KeyboardInterrupt" not in everything
    assert "trial #1 is recorded as FAIL" in " ".join(everything.split())
    storage = tuning_store.get_storage(studies_url)
    study = optuna.load_study(study_name="ldtm:AAPL", storage=storage)
    states = [t.state.name for t in study.get_trials(deepcopy=False)]
    assert states == ["COMPLETE", "FAIL"] and study.best_trial.number == 0
    tuning_store._STORAGES.pop(studies_url, None)
