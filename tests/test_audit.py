"""audit.verify and `ldtm audit verify`: an edit made with raw SQL is found and named."""

from __future__ import annotations

import pytest
from accountability_helpers import ingest, make_model, make_settings
from sqlalchemy import text
from typer.testing import CliRunner

from ldtm_core.audit import verify
from ldtm_core.cli import app
from ldtm_core.fillback import fillback
from ldtm_core.snapshots import predict


@pytest.fixture
def chained(engine, db_url, tmp_path):
    settings = make_settings(tmp_path, db_url)
    df = ingest(engine, ["AAPL", "QQQ"])
    for i, t in enumerate(["AAPL", "QQQ"]):
        make_model(engine, settings, t, seed=i)
    dates = sorted(df["date"].unique())[-8:]
    for d in dates:
        predict(engine, settings, run_date=d)
    return dates


def test_clean_chain_verifies_also_after_fillback(engine, chained):
    fillback(engine)
    report = verify(engine)
    assert report.ok and report.rows_checked == 16 and report.tickers_checked == 2 and report.problems == []


def test_edited_prediction_is_reported_with_ticker_and_date(engine, chained):
    target = chained[3]
    with engine.begin() as conn:
        conn.execute(
            text(
                "UPDATE snapshots SET next_day_pred = next_day_pred + 0.01 WHERE ticker = 'QQQ' AND run_date = :d"
            ),
            {"d": target},
        )
    report = verify(engine)
    assert not report.ok
    assert [(p.ticker, p.run_date) for p in report.problems] == [("QQQ", target)]
    assert "prediction changed" in report.problems[0].what
    assert verify(engine, tickers=["AAPL"]).ok


@pytest.mark.parametrize(
    "sql",
    [
        "UPDATE snapshots SET direction_pred = 'bearish' WHERE ticker = 'AAPL' AND run_date = :d AND direction_pred <> 'bearish'",
        "UPDATE snapshots SET direction_pred = 'bullish' WHERE ticker = 'AAPL' AND run_date = :d AND direction_pred = 'bearish'",
        "UPDATE snapshots SET run_date_close = run_date_close * 1.0001 WHERE ticker = 'AAPL' AND run_date = :d",
        "UPDATE snapshots SET model_version = 'v9.forged' WHERE ticker = 'AAPL' AND run_date = :d",
    ],
)
def test_each_hashed_column_is_covered(engine, chained, sql):
    with engine.begin() as conn:
        n = conn.execute(text(sql), {"d": chained[2]}).rowcount
    report = verify(engine)
    assert report.ok == (n == 0)
    if n:
        assert {(p.ticker, p.run_date) for p in report.problems} == {("AAPL", chained[2])}


def test_rehashed_or_deleted_row_breaks_the_link(engine, chained):
    with engine.begin() as conn:
        conn.execute(text("DELETE FROM snapshots WHERE ticker = 'AAPL' AND run_date = :d"), {"d": chained[4]})
    report = verify(engine)
    assert [(p.ticker, p.run_date) for p in report.problems] == [("AAPL", chained[5])]
    assert "chain broken" in report.problems[0].what


def test_cli_exits_non_zero_and_lists_bad_rows(engine, chained, ldtm_env):
    runner = CliRunner()
    ok = runner.invoke(app, ["audit", "verify"])
    assert ok.exit_code == 0, ok.output
    assert "16 rows" in ok.output
    with engine.begin() as conn:
        conn.execute(
            text("UPDATE snapshots SET one_month_pred = 1.0 WHERE ticker = 'AAPL' AND run_date = :d"),
            {"d": chained[1]},
        )
    bad = runner.invoke(app, ["audit", "verify"])
    assert bad.exit_code == 1
    assert "AAPL" in bad.output and str(chained[1]) in bad.output
