"""Revision 0035: a store written by the previous release (0034: per-ticker LSTMs only) upgrades to the
release with recipes. Its models still read as the LSTM and serve, its stored folds are reused (their
keys unchanged), its chain verifies, and it gains the empty universe trials ledger."""

from __future__ import annotations

import datetime as dt

import pytest
import torch
from accountability_helpers import make_settings
from migrate_helpers import fresh_database, upgrade_by_cli
from sqlalchemy import func, inspect, select

from ldtm_core.accountability.gate.backtest_pool import backtest_model
from ldtm_core.accountability.ledger.audit import verify
from ldtm_core.accountability.ledger.snapshots import predict
from ldtm_core.data.ingest import ingest_frame
from ldtm_core.data.synthetic_market import generate
from ldtm_core.learning.backtest import run_backtest
from ldtm_core.learning.model import get_profile
from ldtm_core.learning.registry import get_model
from ldtm_core.learning.training import train_ticker
from ldtm_core.migrate import upgrade
from ldtm_core.schema import model_registry, snapshots

PREVIOUS = "0034"


@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_a_store_of_lstms_upgrades_to_recipes_and_keeps_every_model_fold_and_row(tmp_path, backend, request):
    torch.manual_seed(0)
    with fresh_database(backend, tmp_path, request) as url:
        engine = upgrade(url, PREVIOUS)
        ingest_frame(engine, generate(["AAPL"], "2023-01-03", "2024-06-28", seed=7), "synthetic")
        settings = make_settings(tmp_path, url)
        cfg = get_profile("demo")
        model_id = train_ticker(engine, settings, "AAPL", cfg, "demo", as_of=dt.date(2024, 3, 28)).model_id
        before = run_backtest(engine, settings, "AAPL", folds=2)
        predict(engine, settings, run_date=dt.date(2024, 4, 1), mode="replay")
        with engine.connect() as conn:
            stored = conn.execute(select(model_registry.c.config_json)).scalar_one()

        engine = upgrade_by_cli(url, tmp_path, "0035", "universe_trials")

        assert "universe_trials" in inspect(engine).get_table_names()
        rec = get_model(engine, model_id)
        assert rec.recipe == "lstm" and rec.config == cfg and rec.config_json == stored
        # Its folds: every key the same, every fold reused, every figure the same.
        after = backtest_model(engine, settings, "AAPL", folds=2)
        assert [f.fit.fold_key for f in after.folds] == [f.fit.fold_key for f in before.folds]
        assert after.refit_folds == 0 and [f.scores for f in after.folds] == [f.scores for f in before.folds]
        # It still serves, chained after the rows written before the upgrade.
        result = predict(engine, settings, run_date=dt.date(2024, 4, 2), mode="replay")
        assert result.tickers_predicted == ["AAPL"]
        with engine.connect() as conn:
            assert conn.execute(select(func.count()).select_from(snapshots)).scalar_one() == 2
        assert verify(engine).ok
