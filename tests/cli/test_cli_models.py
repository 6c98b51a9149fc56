"""`ldtm train`, `ldtm export onnx`, `ldtm gpu slots`, `ldtm bench train`: outputs and exit codes."""

from __future__ import annotations

import datetime as dt
import re

import pytest
import torch
from sqlalchemy import select, update
from typer.testing import CliRunner

from ldtm_core.cli import app
from ldtm_core.data.ingest import ingest_frame
from ldtm_core.data.synthetic_market import generate
from ldtm_core.db import get_engine
from ldtm_core.schema import model_registry, prices

runner = CliRunner()


@pytest.fixture(autouse=True)
def _wide(monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    torch.set_num_threads(1)


@pytest.fixture
def market(ldtm_env):
    engine = get_engine(ldtm_env["url"])
    ingest_frame(engine, generate(["AAPL", "NVDA"], "2022-01-03", "2023-12-29", seed=4), "synthetic")
    # FER listed in May 2024: 90 sessions are too little history to train on.
    fer = generate(["FER"], "2024-01-02", "2024-12-31", seed=4)
    assert len(fer) >= 90
    ingest_frame(engine, fer.head(90), "synthetic")
    return engine


def _rows(engine):
    with engine.connect() as conn:
        return conn.execute(select(model_registry)).mappings().all()


def _line(output, ticker):
    """The ticker's row of the result table (not a progress line, `train n/N: TICKER status` or `backtest
    n/N: …`, which a slow step prints before the table)."""
    return next(
        line
        for line in output.splitlines()
        if f" {ticker} " in line and not re.match(r"(train|backtest) \d+/\d+: ", line)
    )


def test_train_reports_progress_per_ticker(market, ldtm_env):
    r = runner.invoke(app, ["train", "--tickers", "AAPL,FER", "--profile", "demo", "--set", "max_epochs=1"])
    assert r.exit_code == 0, r.output
    # Not a terminal: plain lines; the last one always shows the final count.
    assert "train 2/2: " in r.output


def test_train_then_export(market, ldtm_env):
    r = runner.invoke(
        app,
        ["train", "--tickers", "AAPL,FER", "--profile", "demo", "--set", "max_epochs=2", "--workers", "1"],
    )
    assert r.exit_code == 0, r.output
    assert "trained" in _line(r.output, "AAPL") and "cpu" in _line(r.output, "AAPL")
    assert "skipped" in _line(r.output, "FER") and "too little history" in _line(r.output, "FER")
    (row,) = _rows(market)
    assert row["ticker"] == "AAPL" and row["epochs"] == 2 and row["status"] == "candidate"

    r = runner.invoke(app, ["export", "onnx", "--ticker", "AAPL", "--candidate"])
    assert r.exit_code == 0, r.output
    exported = list((ldtm_env["home"] / "exports").glob("*.onnx"))
    assert len(exported) == 1 and exported[0].name.startswith("AAPL_")
    assert "opset 17" in r.output

    out = ldtm_env["home"] / "explicit.onnx"
    r = runner.invoke(
        app, ["export", "onnx", "--ticker", "AAPL", "--checkpoint", row["checkpoint_path"], "--out", str(out)]
    )
    assert r.exit_code == 0, r.output and out.is_file()

    r = runner.invoke(app, ["export", "onnx", "--ticker", "NVDA"])
    assert r.exit_code == 2 and "no active or candidate model" in r.output
    # A checkpoint of another ticker is refused for this one.
    r = runner.invoke(app, ["export", "onnx", "--ticker", "NVDA", "--checkpoint", row["checkpoint_path"]])
    assert r.exit_code == 2 and "belongs to ticker AAPL" in r.output


def test_failing_ticker_gives_nonzero_exit_others_trained(market, ldtm_env):
    # A zero close in the middle of NVDA's history (a broken source) makes its features non-finite.
    with market.begin() as conn:
        conn.execute(
            update(prices)
            .where(prices.c.ticker == "NVDA", prices.c.date == dt.date(2023, 3, 1))
            .values(close=0.0)
        )
    r = runner.invoke(
        app, ["train", "-t", "AAPL,NVDA", "-p", "demo", "--set", "max_epochs=1", "--workers", "1"]
    )
    assert r.exit_code == 1, r.output
    assert "trained" in _line(r.output, "AAPL") and "failed" in _line(r.output, "NVDA")
    assert [row["ticker"] for row in _rows(market)] == ["AAPL"]


@pytest.mark.parametrize(
    "args, message",
    [
        (["--set", "hidden_size=0"], "hidden_size"),
        (["--set", "bogus=1"], "unknown"),
        (["--profile", "giant"], "unknown profile"),
        (["--as-of", "2024-13-01"], "--as-of"),
    ],
)
def test_bad_train_options_exit_2_and_write_nothing(market, args, message):
    r = runner.invoke(
        app,
        ["train", "--tickers", "AAPL", *(["--profile", "demo"] if "--profile" not in args else []), *args],
    )
    assert r.exit_code == 2, r.output
    assert message in r.output
    assert _rows(market) == []


def test_ticker_outside_universe_refused(market):
    r = runner.invoke(app, ["train", "--tickers", "ZZZZ", "--profile", "demo"])
    assert r.exit_code == 2 and "not in the universe" in r.output


def test_gpu_slots_command(monkeypatch):
    import ldtm_core.learning.gpu_slots as gs

    monkeypatch.setattr(gs, "probe", lambda nvml=None: [gs.GpuMemory(0, "Fake GPU", 16000, 4000)])
    monkeypatch.setattr(gs, "cpu_count", lambda: 16)
    r = runner.invoke(app, ["gpu", "slots"])
    assert r.exit_code == 0, r.output
    assert "Fake GPU" in r.output and "pool limit: 4 (cuda)" in r.output
    monkeypatch.setattr(gs, "cpu_count", lambda: 2)  # fewer cores than the card's 4 slots: one per core
    r = runner.invoke(app, ["gpu", "slots"])
    assert "pool limit: 2 (cuda)" in r.output and "at most one per core (2 cores)" in r.output
    monkeypatch.setattr(gs, "probe", lambda nvml=None: [])
    r = runner.invoke(app, ["gpu", "slots"])
    assert r.exit_code == 0 and "(cpu)" in r.output


def test_bench_train_small():
    r = runner.invoke(
        app, ["bench", "train", "--samples", "128", "--epochs", "1", "--no-early-stop", "--pool-workers", "1"]
    )
    assert r.exit_code == 0, r.output
    for label in ("(a) project loop", "(b) seed-style", "(c) floor", "a/c =", "a/b ="):
        assert label in r.output
    r = runner.invoke(app, ["bench", "train", "--samples", "10"])
    assert r.exit_code == 2


# --------------------------------------------------------------------------------------------------
# Issue 10: misuse a new user tried.


def _candidate(ldtm_env, engine, ticker: str = "AAPL") -> int:
    from accountability_helpers import make_model, make_settings

    settings = make_settings(ldtm_env["home"].parent, ldtm_env["url"])
    return make_model(engine, settings, ticker)


def test_train_with_nothing_trained_exits_non_zero(ldtm_env):
    r = runner.invoke(app, ["train", "--tickers", "TSLA", "--profile", "demo", "--workers", "1"])
    assert r.exit_code == 1, r.output
    assert "skipped" in _line(r.output, "TSLA") and "no prices" in _line(r.output, "TSLA")
    assert "nothing was trained" in r.output


def test_export_of_a_candidate_needs_the_candidate_flag(ldtm_env):
    engine = get_engine(ldtm_env["url"])
    model_id = _candidate(ldtm_env, engine)
    exports = ldtm_env["home"] / "exports"

    r = runner.invoke(app, ["export", "onnx", "--ticker", "AAPL"])
    assert r.exit_code == 2, r.output
    assert f"only candidate model {model_id}, which has not passed the gate" in r.output
    assert "--candidate" in r.output
    assert not list(exports.glob("*.onnx"))

    r = runner.invoke(app, ["export", "onnx", "--ticker", "AAPL", "--candidate"])
    assert r.exit_code == 0, r.output
    assert f"exported candidate model {model_id}: it has not passed the gate" in r.output
    assert len(list(exports.glob("*.onnx"))) == 1


def test_export_out_into_a_missing_folder_fails_and_creates_nothing(ldtm_env, tmp_path):
    engine = get_engine(ldtm_env["url"])
    _candidate(ldtm_env, engine)
    missing = tmp_path / "nonexistent" / "dir"

    r = runner.invoke(
        app, ["export", "onnx", "--ticker", "AAPL", "--candidate", "--out", str(missing / "x.onnx")]
    )
    assert r.exit_code == 2, r.output
    assert f"the folder {missing} does not exist" in " ".join(r.output.split())
    assert not (tmp_path / "nonexistent").exists()

    r = runner.invoke(app, ["export", "onnx", "--ticker", "AAPL", "--candidate", "--out", str(tmp_path)])
    assert r.exit_code == 2 and "is a directory" in r.output


def test_train_a_global_recipe_once_for_every_ticker(market, ldtm_env):
    r = runner.invoke(app, ["train", "--tickers", "AAPL,NVDA,FER", "--recipe", "ridge", "--set", "alpha=2.5"])
    assert r.exit_code == 0, r.output
    assert "trained" in _line(r.output, "AAPL") and "trained" in _line(r.output, "NVDA")
    assert "too little history for ridge" in _line(r.output, "FER")
    rows = _rows(market)
    assert [(row["ticker"], row["profile"]) for row in rows] == [("AAPL", "ridge"), ("NVDA", "ridge")]
    assert rows[0]["checkpoint_sha256"] == rows[1]["checkpoint_sha256"]  # one fit, one artifact
    assert '"alpha": 2.5' in rows[0]["config_json"] and '"recipe": "ridge"' in rows[0]["config_json"]


def test_a_market_recipe_without_its_market_fails_every_ticker_naming_it(market, ldtm_env):
    r = runner.invoke(
        app, ["train", "--tickers", "AAPL,NVDA", "--recipe", "ridge_market", "--set", "market=SPY"]
    )
    assert r.exit_code != 0, r.output
    said = " ".join(r.output.split())
    assert "recipe ridge_market: its inputs read SPY, which has no prices" in said, r.output
    assert _rows(market) == []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--recipe", "gru"], "recipe 'gru' is unknown; known: lstm, ridge, lightgbm"),
        (["--recipe", "ridge", "--profile", "demo"], "--profile applies to the lstm recipe, not to ridge"),
        (["--recipe", "lightgbm", "--warm-start"], "--warm-start applies to the lstm recipe"),
        (["--recipe", "ridge", "--set", "alpha=much"], "--set alpha='much': expected a float"),
        (["--recipe", "ridge", "--set", "hidden_size=4"], "--set hidden_size: unknown TabularConfig field"),
        (["--recipe", "global_lstm", "--set", "window=1"], "global_lstm: window must be at least 2 sessions"),
        (["--recipe", "ridge_market", "--set", "market="], "--set market=TICKER needs a ticker"),
        # Values the libraries would refuse only at fit time, in their own words, or take silently.
        (["--recipe", "ridge", "--set", "alpha=-1"], "ridge: --set alpha must be in [0, 1e+12], got -1.0"),
        (["--recipe", "lightgbm", "--set", "num_leaves=1"], "--set num_leaves must be a whole number >= 2"),
        (["--recipe", "lightgbm", "--set", "learning_rate=0"], "--set learning_rate must be in (0, 1]"),
        (["--recipe", "lightgbm_market", "--set", "subsample=1.5"], "--set subsample must be in (0, 1]"),
        (
            ["--recipe", "lightgbm", "--set", "n_estimators=0"],
            "--set n_estimators must be a whole number >= 1",
        ),
    ],
)
def test_train_refuses_a_bad_recipe_setting_before_touching_the_store(market, ldtm_env, args, message):
    r = runner.invoke(app, ["train", "--tickers", "AAPL", *args])
    assert r.exit_code != 0
    assert message in " ".join(r.output.split()), r.output
    assert _rows(market) == []


def test_a_global_fit_pools_the_member_universe_whatever_tickers_lists_and_says_so(
    market, ldtm_env, monkeypatch
):
    from ldtm_core.learning.recipes.global_fit import fit_pool

    monkeypatch.setenv("LDTM_UNIVERSE", "AAPL,NVDA,FER")
    one = runner.invoke(app, ["train", "--tickers", "AAPL", "--recipe", "ridge", "--set", "alpha=2.5"])
    both = runner.invoke(app, ["train", "--tickers", "AAPL,NVDA", "--recipe", "ridge", "--set", "alpha=2.5"])
    assert one.exit_code == 0 and both.exit_code == 0, one.output + both.output
    said = " ".join(one.output.split())
    assert "ridge (alpha=2.5): one fit in" in said and "on the rows of 3 ticker(s)" in said
    assert "those asked for: AAPL, FER, NVDA" in said  # FER: too little history for a model, its rows fitted
    assert not re.search(r"\d\.\ds", _line(one.output, "AAPL"))  # no per-ticker copy of the one fit's time
    rows = _rows(market)
    assert [r["ticker"] for r in rows] == ["AAPL", "AAPL", "NVDA"]
    # The same config on the same pool: one model, whichever tickers were asked for.
    assert rows[0]["checkpoint_sha256"] == rows[1]["checkpoint_sha256"] == rows[2]["checkpoint_sha256"]
    assert fit_pool(market, rows[0]["id"]) == ["AAPL", "FER", "NVDA"]

    listed = runner.invoke(app, ["registry", "list", "--recipe", "ridge"])
    assert listed.exit_code == 0 and listed.output.count("│ ridge ") == 3, listed.output
    assert "AAPL" in runner.invoke(app, ["registry", "list", "--recipe", "ridge"]).output
    assert "AAPL" not in runner.invoke(app, ["registry", "list", "--recipe", "lightgbm"]).output
    bad = runner.invoke(app, ["registry", "list", "--recipe", "gru"])
    assert bad.exit_code != 0 and "recipe 'gru' is unknown" in bad.output


def test_backtest_recipe_picks_that_recipes_newest_candidate(market, ldtm_env):
    ridge = runner.invoke(app, ["train", "--tickers", "AAPL,NVDA", "--recipe", "ridge"])
    lgbm = runner.invoke(
        app, ["train", "--tickers", "AAPL", "--recipe", "lightgbm", "--set", "n_estimators=20"]
    )
    assert ridge.exit_code == 0 and lgbm.exit_code == 0, ridge.output + lgbm.output
    ridge_id = next(r["id"] for r in _rows(market) if r["ticker"] == "AAPL" and "ridge" in r["config_json"])

    r = runner.invoke(app, ["backtest", "--ticker", "AAPL", "--recipe", "ridge", "--folds", "2"])
    assert r.exit_code == 0, r.output
    assert f"AAPL model {ridge_id}:" in " ".join(r.output.split())  # not the newer LightGBM candidate
    many = runner.invoke(
        app, ["backtest", "--tickers", "AAPL,NVDA,FER", "--recipe", "lightgbm", "--folds", "2"]
    )
    assert "the newest lightgbm candidates" in many.output and "none of recipe lightgbm" in _line(
        many.output, "NVDA"
    )
    missing = runner.invoke(app, ["backtest", "--ticker", "NVDA", "--recipe", "lightgbm"])
    assert missing.exit_code != 0 and "NVDA has no candidate of recipe lightgbm" in " ".join(
        missing.output.split()
    )
