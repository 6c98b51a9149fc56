"""Issue 40 through the CLI: `ldtm signals` names the Sharpe-difference test, states the cost cap and
caveats a short record's annual figures; `ldtm ingest synthetic` honours LDTM_SYNTHETIC_SPLITS."""

from __future__ import annotations

import datetime as dt

import pytest
from signals_helpers import seed_market
from typer.testing import CliRunner

from ldtm_core.cli import app
from ldtm_core.data.corporate_actions import load_actions
from ldtm_core.data.prices import load_prices
from ldtm_core.db import get_engine

runner = CliRunner()


@pytest.fixture
def market(ldtm_env, engine):
    seed_market(engine, ["AAPL", "MSFT", "NVDA", "AMZN", "JPM"], "2023-01-03", "2023-04-28", skill=0.2)


def test_signals_names_the_benchmark_test_and_caveats_a_short_record(market, monkeypatch):
    monkeypatch.setenv("COLUMNS", "400")  # no header wraps
    r = runner.invoke(app, ["signals"])
    assert r.exit_code == 0, r.output
    assert "P(SR > bench)" in r.output and "PSR vs bench" not in r.output
    out = " ".join(r.output.split())
    assert "under a year" in out and "Short record: annualised figures" in out


def test_signals_help_states_the_cost_cap(monkeypatch):
    monkeypatch.setenv("COLUMNS", "250")
    r = runner.invoke(app, ["signals", "--help"])
    assert r.exit_code == 0
    assert "never below" in " ".join(r.output.replace("│", " ").split())


def test_ingest_synthetic_honours_the_splits_setting(ldtm_env, monkeypatch):
    """LDTM_SYNTHETIC_SPLITS was read by `ingest fetch --source synthetic` only: `ingest synthetic` stored
    the continuous market and recorded nothing. Now it stores the raw bars and the split."""
    monkeypatch.setenv("LDTM_SYNTHETIC_SPLITS", "NVDA:2024-06-10:10")
    args = ["ingest", "synthetic", "--tickers", "AAPL,NVDA", "--start", "2024-05-01", "--end", "2024-06-28"]
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.output
    engine = get_engine(ldtm_env["url"])
    acts = load_actions(engine)
    assert [(a.ex_date, a.factor, a.kind) for a in acts["NVDA"]] == [(dt.date(2024, 6, 10), 0.1, "split")]
    assert "AAPL" not in acts
    raw = load_prices(engine, ["NVDA"], adjusted=False)["NVDA"].set_index("date")["close"]
    assert raw[dt.date(2024, 6, 10)] / raw[dt.date(2024, 6, 7)] < 0.2  # the raw bars fall 90 %
    adjusted = load_prices(engine, ["NVDA"])["NVDA"].set_index("date")["close"]
    assert 0.8 < adjusted[dt.date(2024, 6, 10)] / adjusted[dt.date(2024, 6, 7)] < 1.2  # one basis: no jump
