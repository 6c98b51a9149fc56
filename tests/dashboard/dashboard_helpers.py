"""A seeded application database for the dashboard tests (built with the accountability helpers)."""

from __future__ import annotations

import datetime as dt

from accountability_helpers import add_backtest, ingest, make_model, make_settings

from ldtm_core.accountability.gate.gate import GateThresholds, run_gate
from ldtm_core.accountability.ledger.fillback import fillback
from ldtm_core.accountability.ledger.replay import predict_range
from ldtm_core.db import get_engine

TICKERS = ["AAPL", "NVDA"]
FIRST_EVENING, LAST_EVENING = dt.date(2024, 5, 13), dt.date(2024, 6, 14)


def seed(tmp_path, url: str):
    """Prices, one gated model per ticker (AAPL promoted, NVDA held), 24 replayed evenings, filled back."""
    settings = make_settings(tmp_path, url)
    engine = get_engine(url)
    ingest(engine, TICKERS)
    for i, ticker in enumerate(TICKERS):
        mid = make_model(engine, settings, ticker, seed=i)
        # Consistent folds of 50 rows: model-only minus up-only rows = hits minus always-up hits. AAPL
        # beats a coin and always-up beyond noise (66 of 100, p = 0.001; 28 vs 12, p = 0.008): a first
        # deployment must (issue 27).
        fold = (50, 0.66, 0.5, 1.5, 0, 14, 6) if ticker == "AAPL" else (50, 0.48, 0.5, 1.5, 0, 6, 7)
        add_backtest(engine, mid, [fold, fold], ticker)
        run_gate(engine, settings, ticker, thresholds=GateThresholds())
    predict_range(engine, settings, FIRST_EVENING, LAST_EVENING)
    fillback(engine)
    return settings, engine
