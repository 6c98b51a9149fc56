"""Freshness (SPEC §2): stale tickers are named, skipped by name, and filled in by a later rerun."""

from __future__ import annotations

import datetime as dt

import pandas as pd
from accountability_helpers import make_model, make_settings
from sqlalchemy import func, select

from ldtm_core.accountability.ledger.snapshots import predict
from ldtm_core.data.freshness import freshness
from ldtm_core.data.ingest import ingest_frame
from ldtm_core.data.synthetic_market import generate
from ldtm_core.schema import snapshots


def test_stale_ticker_is_named_skipped_and_predicted_after_its_bar_arrives(engine, db_url, tmp_path):
    settings = make_settings(tmp_path, db_url)
    df = generate(["AAPL", "NVDA"], "2023-06-01", "2024-03-08", seed=5)
    df["date"] = pd.to_datetime(df["date"]).dt.date
    evening = dt.date(2024, 3, 8)
    late = (df["ticker"] == "NVDA") & (df["date"] == evening)
    ingest_frame(engine, df[~late], "synthetic")
    for i, t in enumerate(["AAPL", "NVDA"]):
        make_model(engine, settings, t, seed=i)

    report = freshness(engine, ["AAPL", "NVDA", "TSLA"])
    assert report.session == evening and report.fresh == ["AAPL"]
    assert report.stale == {
        "NVDA": "last bar 2024-03-07, 1 session(s) before 2024-03-08",
        "TSLA": "no prices stored",
    }

    first = predict(engine, settings, run_date=evening)
    assert first.tickers_predicted == ["AAPL"] and first.skipped == {
        "NVDA": "no price for NVDA on 2024-03-08"
    }

    ingest_frame(engine, df[late], "synthetic")  # the late bar arrives; the evening is rerun
    assert freshness(engine, ["AAPL", "NVDA"]).ok
    again = predict(engine, settings, run_date=evening)
    assert again.skipped == {}
    with engine.connect() as conn:
        per_ticker = dict(
            conn.execute(
                select(snapshots.c.ticker, func.count())
                .where(snapshots.c.run_date == evening)
                .group_by(snapshots.c.ticker)
            ).all()
        )
    assert per_ticker == {"AAPL": 1, "NVDA": 1}  # the rerun added NVDA and wrote AAPL no second time
