"""The data commands through the real CLI: exit codes, tables, clean errors, and what lands in the DB."""

from __future__ import annotations

import pandas as pd
import pytest
from sqlalchemy import func, select
from typer.testing import CliRunner

from ldtm_core.cli import app
from ldtm_core.data.synthetic_market import generate
from ldtm_core.db import get_engine
from ldtm_core.schema import prices

runner = CliRunner()


def invoke(*args: str):
    return runner.invoke(app, list(args))


def counts(url: str) -> dict[str, int]:
    with get_engine(url).connect() as conn:
        rows = conn.execute(select(prices.c.ticker, func.count()).group_by(prices.c.ticker)).all()
    return {t: n for t, n in rows}


def yahoo_csv(path, ticker: str, n: int = 15) -> pd.DataFrame:
    df = generate([ticker], "2024-01-01", "2024-06-30", 2).head(n)
    out = df[["date", "open", "high", "low", "close", "adj_close", "volume"]]
    out.columns = ["Date", "Open", "High", "Low", "Close", "Adj Close", "Volume"]
    path.write_text(out.to_csv(index=False))
    return out


@pytest.mark.parametrize(
    "args",
    [
        [],
        ["ingest"],
        ["ingest", "synthetic"],
        ["ingest", "csv"],
        ["prices"],
        ["prices", "summary"],
        ["db"],
        ["db", "upgrade"],
        ["universe"],
    ],
)
def test_every_data_command_has_help(args):
    result = invoke(*args, "--help")
    assert result.exit_code == 0, result.output
    assert "Usage:" in result.output


def test_ingest_synthetic_first_n_then_idempotent(ldtm_env):
    result = invoke("ingest", "synthetic", "--tickers", "2", "--start", "2024-01-01", "--end", "2024-03-28")
    assert result.exit_code == 0, result.output
    assert counts(ldtm_env["url"]) == {"AAPL": 61, "NVDA": 61}  # demo universe starts AAPL, NVDA
    assert "122" in result.stdout
    again = invoke("ingest", "synthetic", "--tickers", "2", "--start", "2024-01-01", "--end", "2024-03-28")
    assert again.exit_code == 0
    assert "│ 0 " in again.stdout  # written column
    assert counts(ldtm_env["url"]) == {"AAPL": 61, "NVDA": 61}


def test_ingest_synthetic_comma_list_and_summary(ldtm_env):
    result = invoke("ingest", "synthetic", "-t", "tsla,QQQ", "--start", "2024-01-01", "--end", "2024-01-31")
    assert result.exit_code == 0, result.output
    assert counts(ldtm_env["url"]) == {"QQQ": 21, "TSLA": 21}
    summary = invoke("prices", "summary")
    assert summary.exit_code == 0
    assert "2 tickers, 42 rows" in summary.stdout
    assert "2024-01-02" in summary.stdout and "2024-01-31" in summary.stdout


@pytest.mark.parametrize(
    "args, message",
    [
        (["--tickers", "AAPL,ZZZZ"], "not in the universe: ZZZZ"),
        (["--tickers", "99"], "the universe has 7 tickers"),
        (["--tickers", "0"], "the universe has 7 tickers"),
        (["--tickers", "AA/PL"], "invalid ticker"),
        (["--start", "2024-02-30"], "--start: '2024-02-30' is not a date"),
        (["--start", "2024-05-01", "--end", "2024-04-01"], "is after --end"),
    ],
)
def test_ingest_synthetic_bad_options_exit_2_cleanly(ldtm_env, args, message):
    result = invoke("ingest", "synthetic", *args)
    assert result.exit_code == 2
    assert message in result.stderr
    assert "Traceback" not in result.output
    assert counts(ldtm_env["url"]) == {}


def test_ingest_csv_directory_partial_failure_exit_1(ldtm_env, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    yahoo_csv(data / "AAPL.csv", "AAPL", 15)
    bad = yahoo_csv(data / "NVDA.csv", "NVDA", 15)
    bad.loc[bad.index[3], "Low"] = bad.loc[bad.index[3], "High"] * 2
    (data / "NVDA.csv").write_text(bad.to_csv(index=False))

    result = invoke("ingest", "csv", str(data))

    assert result.exit_code == 1
    assert counts(ldtm_env["url"]) == {"AAPL": 15}
    # The error names file, line, date and problem, on one unwrapped line, without rich eating "[low".
    assert f"{data / 'NVDA.csv'}: 1 bad line(s): line 5 ({bad.iloc[3]['Date']}): high" in result.stderr
    assert "< low" in result.stderr
    assert "1 of 2 file(s) failed" in result.stderr
    assert "│ ok " in result.stdout and "failed" in result.stdout  # one row per file in the table


def test_ingest_csv_all_good_and_allow_new(ldtm_env, tmp_path):
    yahoo_csv(tmp_path / "AAPL.csv", "AAPL", 10)
    yahoo_csv(tmp_path / "MSFT.csv", "MSFT", 10)
    refused = invoke("ingest", "csv", str(tmp_path / "AAPL.csv"), str(tmp_path / "MSFT.csv"))
    assert refused.exit_code == 1
    assert "MSFT is not in the universe" in refused.stderr
    assert counts(ldtm_env["url"]) == {"AAPL": 10}
    ok = invoke("ingest", "csv", "--allow-new", str(tmp_path / "AAPL.csv"), str(tmp_path / "MSFT.csv"))
    assert ok.exit_code == 0, ok.output
    assert counts(ldtm_env["url"]) == {"AAPL": 10, "MSFT": 10}


def test_ingest_csv_missing_path_and_empty_directory(ldtm_env, tmp_path):
    missing = invoke("ingest", "csv", str(tmp_path / "nope.csv"))
    assert missing.exit_code == 1
    assert "nope.csv: file does not exist" in missing.stderr
    empty = tmp_path / "empty"
    empty.mkdir()
    result = invoke("ingest", "csv", str(empty))
    assert result.exit_code == 2
    assert "holds no .csv or .parquet files" in result.stderr


def test_db_upgrade_and_universe(ldtm_env):
    up = invoke("db", "upgrade")
    assert up.exit_code == 0, up.output
    assert "at revision" in up.stdout
    uni = invoke("universe")
    assert uni.exit_code == 0
    assert uni.stdout.startswith("7 tickers: AAPL NVDA")


@pytest.mark.parametrize(
    "args",
    [
        ["ingest", "synthetic", "--tickers", ""],
        ["ingest", "synthetic", "--tickers", " , "],
        ["train", "--tickers", "", "--profile", "demo"],
        ["predict", "--tickers", ""],
        ["audit", "verify", "--tickers", ""],
    ],
)
def test_an_explicitly_empty_ticker_list_is_an_error_in_every_command(ldtm_env, args):
    result = invoke(*args)
    assert result.exit_code == 2, result.output
    assert "--tickers is empty" in result.stderr
    assert counts(ldtm_env["url"]) == {}


def test_the_product_default_universe_is_full_so_goog_csv_is_accepted(ldtm_env, tmp_path, monkeypatch):
    monkeypatch.delenv("LDTM_UNIVERSE")
    yahoo_csv(tmp_path / "GOOG.csv", "GOOG", 12)
    result = invoke("ingest", "csv", str(tmp_path / "GOOG.csv"))
    assert result.exit_code == 0, result.output
    assert counts(ldtm_env["url"]) == {"GOOG": 12}
    assert invoke("universe").stdout.startswith("103 tickers:")


def test_ingest_csv_keeps_stored_history_unless_forced_and_warns_about_a_split(
    ldtm_env, tmp_path, monkeypatch
):
    """Issue 20 item 14: the same history checks as `ingest fetch` (no overwrite without --force, and
    the split warning) for an explicit CSV ingest."""
    monkeypatch.delenv("LDTM_FORCE_REINGEST", raising=False)
    first = yahoo_csv(tmp_path / "AAPL.csv", "AAPL", 60)
    assert invoke("ingest", "csv", str(tmp_path / "AAPL.csv")).exit_code == 0
    stored = {r.date: r.close for r in _closes(ldtm_env["url"])}
    changed = first.copy()
    for c in ("Open", "High", "Low", "Close", "Adj Close"):
        changed.loc[5:25, c] = changed.loc[5:25, c] * 1.03  # older history, not one rescale before a date
    (tmp_path / "AAPL.csv").write_text(changed.to_csv(index=False))
    refused = invoke("ingest", "csv", str(tmp_path / "AAPL.csv"))
    assert refused.exit_code == 1
    assert "changes 21 stored bars" in refused.stderr and "--force" in refused.stderr
    assert {r.date: r.close for r in _closes(ldtm_env["url"])} == stored
    forced = invoke("ingest", "csv", "--force", str(tmp_path / "AAPL.csv"))
    assert forced.exit_code == 0, forced.output
    assert {r.date: r.close for r in _closes(ldtm_env["url"])} != stored

    # A file holding a 4:1 split nobody recorded: stored, with the same warning as `ingest fetch`.
    split = yahoo_csv(tmp_path / "NVDA.csv", "NVDA", 30)
    for c in ("Open", "High", "Low", "Close", "Adj Close"):
        split.loc[20:, c] = split.loc[20:, c] / 4
    (tmp_path / "NVDA.csv").write_text(split.to_csv(index=False))
    result = invoke("ingest", "csv", str(tmp_path / "NVDA.csv"))
    assert result.exit_code == 0, result.output
    assert "one-day move beyond 40% not explained by a recorded corporate action" in result.stderr
    assert f"NVDA {split.loc[20, 'Date']}" in result.stderr


def _closes(url):
    with get_engine(url).connect() as conn:
        return conn.execute(select(prices.c.date, prices.c.close).where(prices.c.ticker == "AAPL")).all()
