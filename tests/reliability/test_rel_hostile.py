"""Hostile and bad input: refused with a clear message and a non-zero exit, nothing written."""

from __future__ import annotations

import datetime as dt

import pytest
from rel_helpers import RUN_DATE, build_world, table_counts
from typer.testing import CliRunner

from ldtm_core.accountability.gate.gate import run_gate
from ldtm_core.accountability.ledger.audit import verify
from ldtm_core.accountability.ledger.snapshots import predict
from ldtm_core.cli import app
from ldtm_core.config import Settings
from ldtm_core.data.ingest import ingest_synthetic
from ldtm_core.data.prices import load_prices
from ldtm_core.data.universe import validate_ticker
from ldtm_core.db import get_engine
from ldtm_core.errors import InputError
from ldtm_core.learning import registry
from ldtm_core.learning.backtest import run_backtest
from ldtm_core.learning.model import get_profile
from ldtm_core.learning.training import train_ticker

HOSTILE = [
    "../x",
    "..",
    "",
    "A" * 13,
    "A" * 5000,
    "AAPL'; DROP TABLE prices;--",
    "AAPL/../../etc/passwd",
    "ÄPFEL",
    "株式",
    "AAPL\x00",
    "$(rm -rf ~)",
    " ",
]

runner = CliRunner()


@pytest.mark.parametrize("bad", HOSTILE)
def test_validator_refuses_hostile_tickers_with_a_clear_message(bad):
    with pytest.raises(InputError, match="ticker"):
        validate_ticker(bad)


@pytest.fixture
def world(db_url, tmp_path, monkeypatch):
    home = tmp_path / "home"
    settings = build_world(db_url, home, tickers=["AAPL", "NVDA"])
    monkeypatch.setenv("LDTM_HOME", str(home))
    monkeypatch.setenv("LDTM_DATABASE_URL", db_url)
    monkeypatch.setenv("LDTM_UNIVERSE", "demo")
    monkeypatch.setenv("COLUMNS", "200")
    return settings, get_engine(db_url), db_url


def _core_calls(settings: Settings, engine, bad: str):
    from ldtm_core.learning.model import get_profile

    return {
        "predict": lambda: predict(engine, settings, RUN_DATE, tickers=[bad]),
        "run_gate": lambda: run_gate(engine, settings, bad),
        "run_backtest": lambda: run_backtest(engine, settings, bad, get_profile("demo")),
        "rollback": lambda: registry.rollback(engine, bad, "x"),
        "history": lambda: registry.history(engine, bad),
        "list_models": lambda: registry.list_models(engine, bad),
        "audit.verify": lambda: verify(engine, [bad]),
        "load_prices": lambda: load_prices(engine, [bad]),
        "ingest_synthetic": lambda: ingest_synthetic(
            engine, [bad], dt.date(2024, 1, 2), dt.date(2024, 2, 1), 0
        ),
    }


@pytest.mark.parametrize("bad", ["../x", "AAPL'; DROP TABLE prices;--", "A" * 300, "ÄPFEL", ""])
def test_core_functions_refuse_hostile_tickers_and_write_nothing(world, bad):
    settings, engine, url = world
    before = table_counts(url)
    for name, call in _core_calls(settings, engine, bad).items():
        with pytest.raises(InputError, match="ticker"):
            call()
            pytest.fail(f"{name} accepted {bad!r}")
    out = train_ticker(engine, settings, bad, get_profile("demo"), "demo")
    assert out.status == "failed" and "invalid ticker" in out.reason
    assert table_counts(url) == before
    assert not (settings.home / "x").exists() and not list(settings.checkpoint_dir.rglob("*x*"))


TICKER_COMMANDS = [
    ["predict", "--run-date", RUN_DATE.isoformat(), "-t", "{t}"],
    ["backtest", "--ticker", "{t}"],
    ["gate", "--ticker", "{t}"],
    ["registry", "history", "{t}"],
    ["registry", "rollback", "{t}"],
    ["registry", "list", "--ticker", "{t}"],
    ["export", "onnx", "--ticker", "{t}"],
    ["audit", "verify", "-t", "{t}"],
    ["train", "-t", "{t}", "-p", "demo", "--allow-new"],
    ["ingest", "synthetic", "-t", "{t}", "--allow-new", "--start", "2024-01-02", "--end", "2024-02-01"],
]


@pytest.mark.parametrize("bad", ["../x", "AAPL'; DROP TABLE prices;--", "A" * 300, "ÄPFEL"])
def test_every_cli_command_refuses_hostile_tickers(world, bad):
    _, _, url = world
    before = table_counts(url)
    for cmd in TICKER_COMMANDS:
        args = [a.replace("{t}", bad) for a in cmd]
        r = runner.invoke(app, args)
        assert r.exit_code == 2, (cmd, r.exit_code, r.output)
        assert "invalid ticker" in " ".join(r.output.split()), (cmd, r.output)
        assert r.exception is None or isinstance(r.exception, SystemExit), (cmd, r.exception)
    assert table_counts(url) == before


BAD_ARGS = [
    (["predict", "--run-date", "2024-13-45"], "not a date"),
    (["predict", "--run-date", "1990-01-02"], "outside the price data"),
    (["predict", "--run-date", "2024-12-02"], "outside the price data"),
    (["predict", "--run-date", "2024-05-04"], "not an XNYS trading session"),
    (["predict", "--mode", "sideways"], "mode must be"),
    (["predict", "--neutral-band", "-1"], "neutral band"),
    (["predict", "--neutral-band", "abc"], "Invalid value"),
    (["predict", "-t", "FER"], "no active or candidate model"),
    (["backtest", "--ticker", "AAPL", "--folds", "0"], "folds must be >= 1"),
    (["backtest", "--ticker", "AAPL", "--folds", "x"], "Invalid value"),
    (["backtest", "--ticker", "AAPL", "--test-sessions", "-5"], "test sessions"),
    (["backtest", "--ticker", "AAPL", "--model-id", "999"], "not in the registry"),
    (["gate", "--ticker", "AAPL", "--min-folds", "0"], "min folds"),
    (["gate", "--ticker", "AAPL", "--min-accuracy", "-5"], "min direction accuracy"),
    (["gate", "--ticker", "AAPL", "--max-error", "-1"], "max mean"),
    (["gate", "--ticker", "AAPL"], "no candidate model"),
    (["gate", "--ticker", "FER"], "no candidate model"),
    (["registry", "rollback", "AAPL"], "no retired model"),
    (["leaderboard", "--mode", "bogus"], "leaderboard mode"),
    (["train", "-t", "AAPL", "--workers", "0"], "Invalid value"),
    (["train", "-t", "AAPL", "-p", "nope"], "profile"),
    (["train", "-t", "AAPL", "-p", "demo", "--set", "max_epochs=0"], "max_epochs"),
    (["train", "-t", "AAPL", "-p", "demo", "--set", "hidden_size=big"], "expected a int"),
    (["train", "-t", "AAPL", "-p", "demo", "--as-of", "yesterday"], "is not a date"),
    (["train", "-t", "ZZZZ", "-p", "demo"], "not in the universe"),
    (["ingest", "synthetic", "-t", "0"], "give 1.."),
    (["ingest", "synthetic", "-t", "AAPL", "--start", "2024-02-01", "--end", "2024-01-01"], "after --end"),
    (["ingest", "synthetic", "-t", "ZZZZ"], "not in the universe"),
    (["ingest", "csv", "/nonexistent/file.csv"], "does not exist"),
    (["export", "onnx", "--ticker", "FER"], "no active or candidate model"),
]


@pytest.mark.parametrize("args,message", BAD_ARGS, ids=lambda v: " ".join(v) if isinstance(v, list) else None)
def test_bad_cli_input_exits_non_zero_with_a_clear_error_and_writes_nothing(world, args, message):
    _, _, url = world
    before = table_counts(url)
    r = runner.invoke(app, args)
    assert r.exit_code != 0, r.output
    assert message in " ".join(r.output.split()), r.output
    assert r.exception is None or isinstance(r.exception, SystemExit), r.exception
    assert table_counts(url) == before


EMPTY_DB_FAILS = [
    (["predict"], "no active or candidate model"),
    (["predict", "--run-date", "2024-05-01"], "no active or candidate model"),
    (["backtest", "--ticker", "AAPL"], "no candidate model"),
    (["gate", "--ticker", "AAPL"], "no candidate model"),
    (["registry", "rollback", "AAPL"], "no retired model"),
    (["export", "onnx", "--ticker", "AAPL"], "no active or candidate model"),
]


@pytest.mark.parametrize(
    "args,message", EMPTY_DB_FAILS, ids=lambda v: " ".join(v) if isinstance(v, list) else None
)
def test_empty_database_commands_fail_clearly(ldtm_env, args, message):
    r = runner.invoke(app, args)
    assert r.exit_code == 2, r.output
    assert message in " ".join(r.output.split())
    assert table_counts(ldtm_env["url"]) == dict.fromkeys(table_counts(ldtm_env["url"]), 0)


@pytest.mark.parametrize("args", [["fillback"], ["leaderboard"], ["audit", "verify"], ["prices", "summary"]])
def test_empty_database_read_commands_are_clean_no_ops(ldtm_env, args):
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.output
    assert table_counts(ldtm_env["url"]) == dict.fromkeys(table_counts(ldtm_env["url"]), 0)
