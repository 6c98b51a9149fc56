"""Revision 0036: a store written by the previous release (0035: recipes compute their price features on
every read) upgrades; its recipe models keep serving and their folds are reused, the library's tables
start empty, and once `ldtm features build` fills them the same models read them, the chain intact."""

from __future__ import annotations

import datetime as dt

import pytest
from accountability_helpers import make_settings
from migrate_helpers import fresh_database
from sqlalchemy import func, inspect, select
from typer.testing import CliRunner

from ldtm_core.accountability.ledger.audit import verify
from ldtm_core.accountability.ledger.snapshots import predict
from ldtm_core.cli import app
from ldtm_core.data import feature_store, price_features
from ldtm_core.data.ingest import ingest_frame
from ldtm_core.data.synthetic_market import generate
from ldtm_core.db import get_engine
from ldtm_core.learning.price_windows import load_price_arrays
from ldtm_core.learning.recipes import global_fit, serving
from ldtm_core.learning.recipes.global_backtest import backtest_fit
from ldtm_core.migrate import current_revision, head_revision, upgrade
from ldtm_core.schema import price_feature_rows, snapshots

PREVIOUS = "0035"
TICKERS = ["AAPL", "MSFT"]


def _previous_release_read(engine, bars):
    """The previous release's read: the library computed from the bars (it had no tables to read)."""
    values = price_features.compute_panel(bars)[list(price_features.feature_names())].to_numpy()
    return values, {}


@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_a_store_of_recipes_upgrades_and_its_models_read_the_stored_library(
    tmp_path, backend, request, monkeypatch
):
    with fresh_database(backend, tmp_path, request) as url:
        monkeypatch.setattr(feature_store, "library_values", _previous_release_read)
        engine = upgrade(url, PREVIOUS)
        ingest_frame(engine, generate(TICKERS, "2023-01-03", "2024-06-28", seed=7), "synthetic")
        settings = make_settings(tmp_path, url)
        serving.clear_cache()
        outcomes = global_fit.train_global(engine, settings, "ridge", TICKERS, as_of=dt.date(2024, 3, 28))
        model_id = outcomes[0].model_id
        before = backtest_fit(engine, settings, model_id, folds=2)
        predict(engine, settings, run_date=dt.date(2024, 4, 1), mode="replay")

        env = {"LDTM_DATABASE_URL": url, "LDTM_HOME": str(tmp_path)}
        dry = CliRunner().invoke(app, ["db", "upgrade", "--dry-run"], env=env)
        assert dry.exit_code == 0 and "0036" in dry.output and "price_feature_rows" in dry.output, dry.output
        out = CliRunner().invoke(app, ["db", "upgrade"], env=env)
        assert out.exit_code == 0, out.output
        monkeypatch.undo()
        assert current_revision(url) == head_revision()
        engine = get_engine(url)
        assert {"price_feature_rows", "price_feature_sets"} <= set(inspect(engine).get_table_names())

        # Empty until the features asset runs: the models still serve, computing the library as before.
        result = predict(engine, settings, run_date=dt.date(2024, 4, 2), mode="replay")
        assert result.tickers_predicted == TICKERS, result.skipped
        built = CliRunner().invoke(
            app, ["features", "build", "--tickers", ",".join(TICKERS), "--allow-new"], env=env
        )
        assert built.exit_code == 0, built.output
        with engine.connect() as conn:
            assert conn.execute(select(func.count()).select_from(price_feature_rows)).scalar_one() > 0
        bars = global_fit.panel_bars(
            load_price_arrays(engine, TICKERS, dt.date(2023, 1, 3), dt.date(2024, 6, 28))
        )
        assert feature_store.library_values(engine, bars)[1] == {}  # every ticker reads its stored rows

        # Its folds: the same keys, reused, the same figures.
        after = backtest_fit(engine, settings, model_id, folds=2)
        assert (after.refit_folds, after.reused_folds) == (0, 2)
        for t in TICKERS:
            keys = [[f.fit.fold_key for f in bt.results[t].folds] for bt in (before, after)]
            assert keys[0] == keys[1]
            assert [f.scores for f in after.results[t].folds] == [f.scores for f in before.results[t].folds]
        result = predict(engine, settings, run_date=dt.date(2024, 4, 3), mode="replay")
        assert result.tickers_predicted == TICKERS, result.skipped
        with engine.connect() as conn:
            assert conn.execute(select(func.count()).select_from(snapshots)).scalar_one() == 3 * len(TICKERS)
        assert verify(engine).ok
