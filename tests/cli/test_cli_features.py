"""`ldtm features build` and `ldtm features show` through the real CLI."""

from __future__ import annotations

import re

import pytest
from sqlalchemy import text
from typer.testing import CliRunner

from ldtm_core.cli import app
from ldtm_core.data.ingest import ingest_frame
from ldtm_core.data.synthetic_market import generate
from ldtm_core.db import get_engine

runner = CliRunner()


def invoke(*args: str):
    return runner.invoke(app, list(args))


@pytest.mark.parametrize("args", [["features"], ["features", "build"], ["features", "show"]])
def test_feature_commands_have_help(args):
    result = invoke(*args, "--help")
    assert result.exit_code == 0, result.output
    assert "Usage:" in result.output


def test_build_then_show_then_stale_after_a_revised_close(ldtm_env):
    assert (
        invoke(
            "ingest", "synthetic", "--tickers", "2", "--start", "2024-01-02", "--end", "2024-06-28"
        ).exit_code
        == 0
    )
    built = invoke("features", "build", "--tickers", "AAPL,NVDA")
    assert built.exit_code == 0, built.output
    assert built.stdout.count("built") >= 2 and "105" in built.stdout  # 124 sessions - 19 warm-up rows
    assert "current" in invoke("features", "build", "--tickers", "AAPL").stdout

    shown = invoke("features", "show", "aapl", "--start", "2024-06-24", "--end", "2024-06-26")
    assert shown.exit_code == 0, shown.output
    assert "2024-06-24" in shown.stdout and "2024-06-26" in shown.stdout and "2024-06-27" not in shown.stdout
    assert "rsi_14" in shown.stdout and "current" in shown.stdout

    with get_engine(ldtm_env["url"]).begin() as conn:
        conn.execute(
            text("UPDATE prices SET volume = volume + 1 WHERE ticker = 'AAPL' AND date = '2024-03-01'")
        )
    stale = invoke("features", "show", "AAPL")
    assert stale.exit_code == 0
    assert "stale" in stale.stderr and "revised" in stale.stderr
    rows = [line for line in stale.stdout.splitlines() if line.startswith("│ 2024-")]
    assert len(rows) == 20  # the last 20 rows by default
    assert "built" in invoke("features", "build", "--tickers", "AAPL").stdout


def test_show_errors_are_one_clean_line(ldtm_env):
    missing = invoke("features", "show", "AAPL")
    assert missing.exit_code == 2 and "no stored features for AAPL" in missing.stderr
    bad = invoke("features", "show", "AAPL", "--start", "2024-13-01")
    assert bad.exit_code == 2 and "--start" in bad.stderr
    unknown = invoke("features", "build", "--tickers", "ZZZZ")
    assert unknown.exit_code == 2 and "ZZZZ" in unknown.stderr


def _suggested(output: str) -> list[str]:
    """The `ldtm …` command a message suggests (the last one in backticks), as arguments."""
    commands = re.findall(r"`ldtm ([^`]+)`", " ".join(output.split()))
    assert commands, output
    return commands[-1].split()


def test_show_suggests_a_command_that_works(ldtm_env):
    """Issue 20 item 18: `features show ZZZZ` suggested `ldtm features build --tickers ZZZZ`, which then
    failed ('not in the universe'). Each suggestion is run here and must do what it promises."""
    nothing = invoke("features", "show", "ZZZZ")  # no prices, outside the universe
    assert nothing.exit_code == 2
    assert "ZZZZ has no prices either" in " ".join(nothing.stderr.split())
    assert "`ldtm ingest fetch --tickers ZZZZ --allow-new`" in " ".join(nothing.stderr.split())
    assert _suggested(nothing.stderr) == ["features", "build", "--tickers", "ZZZZ", "--allow-new"]

    frame = generate(["ZZZZ"], "2024-01-02", "2024-03-28", seed=1)
    ingest_frame(get_engine(ldtm_env["url"]), frame, "synthetic")
    prices_only = invoke("features", "show", "ZZZZ")
    assert prices_only.exit_code == 2
    built = invoke(*_suggested(prices_only.stderr))
    assert built.exit_code == 0, built.output
    assert invoke("features", "show", "ZZZZ").exit_code == 0

    in_universe = invoke("features", "show", "AAPL")  # in the universe, no prices
    assert "AAPL has no prices either" in " ".join(in_universe.stderr.split())
    assert "--allow-new" not in in_universe.stderr
