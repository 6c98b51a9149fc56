"""The `leaderboard` asset's metadata says what "beats" controls, gives the universe's answers and names
each ticker without a production model with its reason (issue 27)."""

from __future__ import annotations

from accountability_helpers import add_backtest, make_model, make_settings
from dagster import materialize
from ldtm_dagster_helpers import tiny_resources
from test_board_stats import _board_rows

from ldtm_core.accountability.gate.gate import run_gate
from ldtm_core.db import get_engine
from ldtm_dagster import assets


def test_the_leaderboard_asset_says_what_it_controls_and_who_has_no_champion(
    dagster_instance, sqlite_url, tmp_path
):
    engine = get_engine(sqlite_url)
    settings = make_settings(tmp_path, sqlite_url)
    _board_rows(engine, {"AAA": 0.5, "BBB": 0.5, "EDGE": 1.0})
    refused = make_model(engine, settings, "NOPE")
    add_backtest(engine, refused, [(63, 0.40, 0.5, 1.0, 0, 10, 20)] * 3, ticker="NOPE")
    assert not run_gate(engine, settings, "NOPE").passed

    result = materialize(
        [assets.leaderboard],
        instance=dagster_instance,
        resources=tiny_resources(tmp_path / "home", sqlite_url, universe="AAA,BBB,EDGE,NOPE"),
    )
    assert result.success
    [mat] = result.asset_materializations_for_node("leaderboard")
    meta = mat.metadata
    # The labels: e-BH over the whole records, saying what the board could show; the window's q apart.
    assert "e-BH at 0.05 over the 3 tickers with a record" in meta["label_controls"].value
    assert "shown within five years (1,260 scored evenings) among 3 tickers" in meta["label_controls"].value
    assert "Benjamini-Hochberg over every (ticker, baseline)" in meta["window_q"].value
    # The universe: the record's answer (coin included), then the window's SPA, described as such.
    assert "a coin included, on its whole published record (3 tickers" in meta["universe"].value
    assert meta["universe_record"].data["tickers"] == 3
    assert "after the search over the 3 tickers" in meta["universe_window"].value
    assert "A description of the month, not the label" in meta["universe_window"].value
    assert meta["universe_spa"].data["tickers"] == 3 and 0 <= meta["universe_spa_p"].value <= 1
    assert {"q_vs_always_up", "q_vs_persistence", "next_monday_dates", "one_month_dates"} <= {
        c.name for c in meta["table"].value.schema.columns
    }
    [row] = [r.data for r in meta["no_production_model"].value.records]
    assert row["ticker"] == "NOPE" and "direction_accuracy = 40.00%" in row["reason"]
