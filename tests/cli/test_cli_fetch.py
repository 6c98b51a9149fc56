"""`ldtm ingest fetch`: the configured source, one row per ticker, exit 1 when a ticker failed,
and a warning for a one-day move beyond the threshold."""

from __future__ import annotations

import datetime as dt

import pytest
from typer.testing import CliRunner

from ldtm_core.cli import app
from ldtm_core.data.prices import load_prices
from ldtm_core.data.synthetic_market import generate
from ldtm_core.db import get_engine

runner = CliRunner()


def test_fetch_from_a_folder_names_failures_and_warns_about_a_split(ldtm_env, tmp_path, monkeypatch):
    drop = tmp_path / "drop"
    drop.mkdir()
    df = generate(["AAPL", "NVDA", "TSLA"], "2024-05-20", "2024-06-14", seed=2)
    split = (df["ticker"] == "NVDA") & (df["date"] >= dt.date(2024, 6, 10))
    df.loc[split, ["open", "high", "low", "close", "adj_close"]] /= 10.0
    df.loc[(df["ticker"] == "TSLA") & (df["date"] == dt.date(2024, 6, 3)), "high"] = 0.5  # high < low
    df.to_csv(drop / "week.csv", index=False)
    monkeypatch.setenv("LDTM_PRICE_SOURCE", f"files:{drop}")

    result = runner.invoke(app, ["ingest", "fetch", "--tickers", "AAPL,NVDA,TSLA"])
    assert result.exit_code == 1, result.output
    assert "1 of 3 ticker(s) failed" in result.output
    assert "high 0.5 < low" in result.output.replace("\n", "")
    assert (
        "NVDA 2024-06-10" in result.output and "not explained by a recorded corporate action" in result.output
    )
    stored = load_prices(get_engine(ldtm_env["url"]), ["AAPL", "NVDA", "TSLA"])
    assert len(stored["AAPL"]) == len(stored["NVDA"]) == 19 and stored["TSLA"].empty

    again = runner.invoke(app, ["ingest", "fetch", "--tickers", "AAPL"])  # nothing new in the folder
    assert again.exit_code == 0 and "no new data" in again.output


def test_fetch_synthetic_is_incremental_and_an_unknown_source_is_a_clean_error(ldtm_env, monkeypatch):
    monkeypatch.delenv("LDTM_PRICE_SOURCE", raising=False)
    args = ["ingest", "fetch", "--tickers", "2", "--start", "2024-01-02"]
    assert runner.invoke(app, [*args, "--end", "2024-02-29"]).exit_code == 0
    result = runner.invoke(app, [*args, "--end", "2024-03-08"])
    assert result.exit_code == 0 and "2024-02-22" in result.output  # 5 sessions before 2024-02-29
    bad = runner.invoke(app, ["ingest", "fetch", "--source", "ftp"])
    assert bad.exit_code == 2 and "unknown price source 'ftp'" in bad.output


def test_fetch_records_a_split_and_does_not_warn_about_its_move(ldtm_env, monkeypatch):
    monkeypatch.delenv("LDTM_PRICE_SOURCE", raising=False)
    monkeypatch.setenv("LDTM_SYNTHETIC_SPLITS", "NVDA:2024-06-10:10")
    args = ["ingest", "fetch", "--tickers", "AAPL,NVDA", "--start", "2024-05-01", "--end", "2024-06-14"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "corporate action recorded: NVDA split 10:1 ex 2024-06-10" in result.output
    assert "not explained by a recorded corporate action" not in result.output


def test_fetch_force_rereads_the_refused_file_from_the_cli(ldtm_env, tmp_path, monkeypatch):
    """Issue 20 item 13: `--force` / LDTM_FORCE_REINGEST=1 printed 'no new data', exit 0, prices unchanged."""
    drop = tmp_path / "drop"
    drop.mkdir()
    monkeypatch.setenv("LDTM_PRICE_SOURCE", f"files:{drop}")
    monkeypatch.delenv("LDTM_FORCE_REINGEST", raising=False)
    generate(["AAPL"], "2024-03-01", "2024-03-28").to_csv(drop / "a.csv", index=False)
    assert runner.invoke(app, ["ingest", "fetch", "--tickers", "AAPL"]).exit_code == 0
    revised = generate(["AAPL"], "2024-03-01", "2024-03-28")
    early = revised["date"] == dt.date(2024, 3, 5)
    revised.loc[early, ["close", "high"]] = revised.loc[early, "high"] * 1.05
    revised.to_csv(drop / "b.csv", index=False)
    refused = runner.invoke(app, ["ingest", "fetch", "--tickers", "AAPL"])
    assert refused.exit_code == 1 and "in a way that is not one constant rescale" in refused.output

    monkeypatch.setenv("LDTM_FORCE_REINGEST", "1")
    forced = runner.invoke(app, ["ingest", "fetch", "--tickers", "AAPL"])
    assert forced.exit_code == 0, forced.output
    assert "no new data" not in forced.output
    stored = load_prices(get_engine(ldtm_env["url"]), ["AAPL"], adjusted=False)["AAPL"]
    day = stored[stored["date"] == dt.date(2024, 3, 5)]
    assert day["close"].item() == pytest.approx(
        revised.loc[revised["date"] == dt.date(2024, 3, 5), "close"].item()
    )
