"""Reading prices back, and the data-quality report the Dagster checks show."""

import datetime as dt

from sqlalchemy import delete, update

from ldtm_core.data.ingest import ingest_frame
from ldtm_core.data.prices import latest_price_date, load_prices, price_summary, quality_report
from ldtm_core.data.synthetic_market import generate
from ldtm_core.db import get_engine
from ldtm_core.schema import prices


def _seed(url):
    engine = get_engine(url)
    ingest_frame(engine, generate(["AAPL", "NVDA"], "2024-01-02", "2024-03-28", seed=4), "synthetic")
    return engine


def test_load_prices_returns_every_ticker_sorted_and_empty_frames_for_unknown(db_url):
    engine = _seed(db_url)
    frames = load_prices(engine, ["AAPL", "NVDA", "QQQ"])
    assert list(frames) == ["AAPL", "NVDA", "QQQ"]
    assert frames["QQQ"].empty
    assert frames["AAPL"]["date"].is_monotonic_increasing
    summary = price_summary(engine).set_index("ticker")
    assert summary.loc["AAPL", "rows"] == len(frames["AAPL"])
    assert latest_price_date(engine) == dt.date(2024, 3, 28)


def test_quality_report_finds_broken_bars_and_missing_sessions(db_url):
    engine = _seed(db_url)
    clean = quality_report(engine, ["AAPL", "NVDA"])
    assert clean.ohlc_ok and clean.sessions_ok and clean.rows_checked > 100
    with engine.begin() as conn:
        # open above high: passes the table's CHECK, which only guards low <= high and low > 0
        conn.execute(
            update(prices)
            .where(prices.c.ticker == "AAPL", prices.c.date == dt.date(2024, 2, 5))
            .values(open=prices.c.high * 1.05)
        )
        conn.execute(delete(prices).where(prices.c.ticker == "NVDA", prices.c.date == dt.date(2024, 3, 1)))
    report = quality_report(engine, ["AAPL", "NVDA"])
    assert report.bad_bars == {"AAPL": ["2024-02-05"]}
    assert report.missing_sessions == {"NVDA": ["2024-03-01"]}
