"""`ldtm features build` and `ldtm features show` through the real CLI."""

from __future__ import annotations

import pytest
from sqlalchemy import text
from typer.testing import CliRunner

from ldtm_core.cli import app
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
