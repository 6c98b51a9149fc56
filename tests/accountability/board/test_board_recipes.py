"""The board by recipe: each recipe's rows of the window summed, side by side (CLI, dashboard)."""

from __future__ import annotations

import datetime as dt

import pytest
from accountability_helpers import ingest, make_model, make_settings
from typer.testing import CliRunner

from ldtm_core.accountability.board.leaderboard import leaderboard_by_model
from ldtm_core.accountability.board.recipes import by_recipe, version_recipes
from ldtm_core.accountability.ledger.fillback import fillback
from ldtm_core.accountability.ledger.replay import predict_range
from ldtm_core.learning.recipes import global_fit, serving

TICKERS = ["AAPL", "MSFT", "NVDA"]


def two_recipes(engine, settings) -> None:
    """Ridge serving MSFT and NVDA (candidates of one global fit), a per-ticker LSTM serving AAPL."""
    ingest(engine, TICKERS)
    serving.clear_cache()
    make_model(engine, settings, "AAPL", trained_on=dt.date(2024, 3, 28))
    global_fit.train_global(engine, settings, "ridge", ["MSFT", "NVDA"], as_of=dt.date(2024, 3, 28))
    predict_range(engine, settings, dt.date(2024, 5, 13), dt.date(2024, 6, 14))
    fillback(engine)


@pytest.fixture
def store(engine, tmp_path, db_url):
    settings = make_settings(tmp_path, db_url)
    two_recipes(engine, settings)
    return engine, settings


def test_each_recipe_sums_its_own_models_rows(store):
    engine, _ = store
    table = by_recipe(engine, include_ungated=True).set_index("recipe")

    assert list(table.index) == ["lstm", "ridge"]
    assert table.loc["lstm", "tickers"] == 1 and table.loc["ridge", "tickers"] == 2
    models = leaderboard_by_model(engine, include_ungated=True, with_record=False).set_index("ticker")
    names = version_recipes(engine, TICKERS)
    for recipe, group in models.groupby(lambda t: names[(t, models.loc[t, "model_version"])]):
        assert table.loc[recipe, "n"] == group["n"].sum()
        assert table.loc[recipe, "direction_accuracy"] == pytest.approx(
            group["hits"].sum() / group["n"].sum()
        )
    # Gated rows only by default: none of these models passed a gate (the per-model board of no gated
    # row raised a pandas TypeError before: `ldtm leaderboard --by-model` on a store with no champion).
    assert leaderboard_by_model(engine, with_record=False)["n"].fillna(0).sum() == 0
    assert by_recipe(engine).empty


def test_the_cli_prints_recipes_side_by_side(store, monkeypatch, db_url, tmp_path):
    _, settings = store
    monkeypatch.setenv("LDTM_HOME", str(settings.home))
    monkeypatch.setenv("LDTM_DATABASE_URL", db_url)
    monkeypatch.setenv("COLUMNS", "200")
    from ldtm_core.cli import app

    out = CliRunner().invoke(app, ["leaderboard", "--include-ungated", "--by-recipe"])
    assert out.exit_code == 0, out.output
    rows = [
        line for line in out.output.splitlines() if line.startswith("│ lstm") or line.startswith("│ ridge")
    ]
    assert len(rows) == 2 and "a description, not a paired test" in " ".join(out.output.split())
