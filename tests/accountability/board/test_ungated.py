"""Ungated rows (issue 21): a ticker with no active model is predicted by a candidate that never passed the
gate; its rows are marked ungated and left out of every production figure unless asked for."""

from __future__ import annotations

import datetime as dt

import pytest
from accountability_helpers import ingest, make_model, make_settings
from typer.testing import CliRunner

from ldtm_core.accountability.board.leaderboard import leaderboard, leaderboard_by_model, ungated_note
from ldtm_core.accountability.board.reads import recent_next_day
from ldtm_core.accountability.board.reports import evening_cohorts, latest_evening, ticker_predictions
from ldtm_core.accountability.ledger.fillback import fillback
from ldtm_core.accountability.ledger.snapshots import predict
from ldtm_core.learning import registry

EVENINGS = [dt.date(2024, 6, 18), dt.date(2024, 6, 20), dt.date(2024, 6, 21), dt.date(2024, 6, 24)]


@pytest.fixture
def mixed(engine, db_url, tmp_path):
    """AAPL has an active (promoted) model, GEHC only a candidate; 4 replayed evenings, filled back."""
    settings = make_settings(tmp_path, db_url)
    ingest(engine, ["AAPL", "GEHC"])
    registry.promote(engine, make_model(engine, settings, "AAPL", seed=0), "test", settings)
    make_model(engine, settings, "GEHC", seed=1)
    results = [predict(engine, settings, run_date=d) for d in EVENINGS]
    fillback(engine)
    return engine, results


def test_ungated_rows_are_marked_and_out_of_the_default_figures(mixed):
    engine, results = mixed
    # The run summary's cohort is production's: the gated row only; the ungated one is counted apart.
    last = results[-1]
    assert sum(last.cohort.values()) == 1 and sum(last.cohort_ungated.values()) == 1
    assert last.summary()["ungated"] == ["GEHC"]

    board = leaderboard(engine)
    assert board["ticker"].tolist() == ["AAPL"] and board["gated"].all()
    assert board.loc[0, "n"] == len(EVENINGS)
    note = ungated_note(engine)
    assert note is not None and "GEHC" in note and "--include-ungated" in note

    full = leaderboard(engine, include_ungated=True).set_index("ticker")
    assert sorted(full.index) == ["AAPL", "GEHC"]
    assert bool(full.loc["AAPL", "gated"]) and not bool(full.loc["GEHC", "gated"])
    assert full.loc["GEHC", "n"] == len(EVENINGS) and full.loc["GEHC", "ungated_n"] == len(EVENINGS)
    assert ungated_note(engine, include_ungated=True) is None

    # The two flags compose: with in-sample rows too (there are none here), the same rows.
    both = leaderboard(engine, include_in_sample=True, include_ungated=True).set_index("ticker")
    assert both["n"].to_dict() == full["n"].to_dict()

    assert set(recent_next_day(engine, ["AAPL", "GEHC"])["ticker"]) == {"AAPL"}  # the asset's plot

    per_model = leaderboard_by_model(engine)
    assert per_model["ticker"].tolist() == ["AAPL"]
    all_models = leaderboard_by_model(engine, include_ungated=True).set_index("ticker")
    assert not bool(all_models.loc["GEHC", "gated"]) and bool(all_models.loc["AAPL", "gated"])

    # The dashboard's readers: cohorts count gated rows by default; each evening says whether it was gated.
    cohorts = evening_cohorts(engine)
    assert cohorts[["bullish", "neutral", "bearish"]].sum(axis=1).tolist() == [1] * len(EVENINGS)
    with_ungated = evening_cohorts(engine, include_ungated=True)
    assert with_ungated[["bullish", "neutral", "bearish"]].sum(axis=1).tolist() == [2] * len(EVENINGS)
    assert sum(latest_evening(engine)["cohort"].values()) == 1
    assert not ticker_predictions(engine, "GEHC")["gated"].any()
    assert ticker_predictions(engine, "AAPL")["gated"].all()


def test_cli_leaderboard_hides_and_marks_ungated_tickers(ldtm_env, engine, tmp_path):
    from ldtm_core.cli import app

    settings = make_settings(tmp_path, ldtm_env["url"])
    ingest(engine, ["AAPL", "GEHC"])
    registry.promote(engine, make_model(engine, settings, "AAPL", seed=0), "test", settings)
    make_model(engine, settings, "GEHC", seed=1)
    for d in EVENINGS:
        predict(engine, settings, run_date=d)
    fillback(engine)
    runner = CliRunner()
    out = " ".join(runner.invoke(app, ["leaderboard"]).output.split())
    assert "GEHC (ungated" not in out and "AAPL" in out
    assert "1 ungated ticker hidden (GEHC)" in out and "--include-ungated" in out
    shown = runner.invoke(app, ["leaderboard", "--include-ungated", "--include-in-sample"])
    assert shown.exit_code == 0, shown.output
    text = " ".join(shown.output.split())
    assert "GEHC (ungated)" in text and "ungated: predicted by a candidate that never passed the gate" in text
