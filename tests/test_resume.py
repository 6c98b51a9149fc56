"""Resuming a killed retrain: which tickers already got a candidate since the run started."""

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
