"""price_windows.load_price_arrays: PostgreSQL's COPY read returns what the driver's rows return."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pytest
from accountability_helpers import ingest
from sqlalchemy import update

from ldtm_core.learning import price_windows
from ldtm_core.schema import prices


@pytest.mark.postgres
def test_copy_read_equals_the_row_read(pg_url):
    from ldtm_core.db import get_engine

    engine = get_engine(pg_url)
    # NA: a ticker a CSV reader would take for a missing value; odd doubles must parse to the same bits.
    ingest(engine, ["NA", "AAPL", "QQQ"], start="2024-01-02", end="2024-06-28")
    with engine.begin() as conn:
        conn.execute(update(prices).where(prices.c.ticker == "AAPL").values(close=prices.c.close / 3.0))
        conn.execute(update(prices).where(prices.c.ticker == "QQQ").values(volume=2**53 + 1))
    args = (["NA", "AAPL", "QQQ", "NOPE"], dt.date(2024, 2, 1), dt.date(2024, 5, 31))
    copied = price_windows.load_price_arrays(engine, *args)
    rows = price_windows._read_rows(engine, *args)
    names, dates, values = rows
    assert sorted(copied) == ["AAPL", "NA", "QQQ"]
    for t, a in copied.items():
        mine = names == t
        assert np.array_equal(a["date"], dates[mine]) and a["date"].dtype == dates.dtype
        for f in price_windows.PRICE_FIELDS:
            assert a[f].dtype == np.float64
            assert np.array_equal(a[f], values[f][mine]), (t, f)
