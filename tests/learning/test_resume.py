"""Resuming a killed retrain: which tickers already got a candidate (or a backtest) since the run started."""

from __future__ import annotations

import datetime as dt
import time

import pytest
from accountability_helpers import ingest, make_model, make_settings

from ldtm_core.learning.model import get_profile
from ldtm_core.learning.resume import trained_since

CFG = get_profile("demo", max_epochs=1)


def test_only_candidates_since_the_start_and_within_as_of_count(engine, db_url, tmp_path):
    s = make_settings(tmp_path, db_url)
    ingest(engine, ["AAPL", "NVDA", "TSLA"])
    make_model(engine, s, "AAPL", cfg=CFG)  # before the run: must be retrained
    time.sleep(0.05)
    started = dt.datetime.now(dt.UTC)
    time.sleep(0.05)
    make_model(engine, s, "NVDA", cfg=CFG)
    assert trained_since(engine, ["AAPL", "NVDA", "TSLA"], started) == {"NVDA"}
    assert trained_since(engine, ["AAPL", "TSLA"], started) == set()
    assert trained_since(engine, [], started) == set()
    # With as_of, a candidate that saw prices after it is not this request's candidate.
    assert trained_since(engine, ["NVDA"], started, as_of=dt.date(2023, 6, 1)) == set()
    assert trained_since(engine, ["NVDA"], started, as_of=dt.date(2030, 1, 1)) == {"NVDA"}
    with pytest.raises(ValueError, match="timezone"):
        trained_since(engine, ["NVDA"], started.replace(tzinfo=None))


def test_only_backtests_written_since_the_start_count(engine, db_url, tmp_path, monkeypatch):
    from ldtm_core.learning import backtest, training_loop
    from ldtm_core.learning.resume import backtested_since

    def quick_fit(train, val, cfg, device=None, threads=None, init_state=None):  # weights as initialised
        from ldtm_core.learning.model import LDTM

        return training_loop.FitResult(LDTM(cfg).eval(), 0.0, 1, 1, 0.0, "cpu", 0.0)

    monkeypatch.setattr(training_loop, "fit", quick_fit)
    s = make_settings(tmp_path, db_url)
    ingest(engine, ["AAPL", "NVDA", "TSLA"])
    for t in ("AAPL", "NVDA"):
        make_model(engine, s, t, cfg=CFG)
    backtest.run_backtest(engine, s, "AAPL", folds=2, test_sessions=20)  # an earlier run's backtest
    time.sleep(0.05)
    started = dt.datetime.now(dt.UTC)
    time.sleep(0.05)
    backtest.run_backtest(engine, s, "NVDA", folds=2, test_sessions=20)
    assert backtested_since(engine, ["AAPL", "NVDA", "TSLA"], started) == {"NVDA"}
    assert backtested_since(engine, [], started) == set()
    with pytest.raises(ValueError, match="timezone"):
        backtested_since(engine, ["NVDA"], started.replace(tzinfo=None))
