"""Done-when of issue 20 item 1: the nightly keeps running through a late-recorded split and a bar revision.

Evening E0 predicts AAPL and NVDA. E1's file holds AAPL's first bar after a 4:1 split nobody recorded
(the raw quarter close is filled as E0's next-day actual: a -75 % "day") and NVDA's E1 bar. E2's file
brings AAPL's overlap back-adjusted (the split is recorded from it, a day late) and a revised NVDA E1
bar. Before: E2's blocking `audit_chain_intact` check failed on both actuals and jammed every later
nightly. Now E2's prices step re-fills the split's actual as it records the split, its fillbacks the
revised one (both logged in fill_revisions), and the leaderboard scores the right numbers: the split is no -75 % day and NVDA is scored against its revised close.
"""

import datetime as dt
import os

import pandas as pd
import pytest
from accountability_helpers import make_model, make_settings
from dagster import AssetKey
from ldtm_dagster_helpers import tiny_resources
from sqlalchemy import select, text

from ldtm_core.data.synthetic_market import generate
from ldtm_core.db import get_engine
from ldtm_core.learning.registry import promote
from ldtm_core.schema import snapshots
from ldtm_dagster import defs
from ldtm_dagster.partitions import EVENING_TAG
from ldtm_dagster.partitions import range_tags as _range_tags

TICKERS = ["AAPL", "NVDA"]
E0, E1, E2 = dt.date(2024, 12, 30), dt.date(2024, 12, 31), dt.date(2025, 1, 2)
LEVELS = ["open", "high", "low", "close", "adj_close"]


def _market():
    """The unsplit market, and AAPL as a raw source shows it after a 4:1 split ex E1."""
    base = generate(TICKERS, "2024-06-03", str(E2), seed=0)
    raw = base.copy()
    split = (raw["ticker"] == "AAPL") & (raw["date"] >= E1)
    raw.loc[split, LEVELS] = raw.loc[split, LEVELS] / 4
    raw.loc[split, "volume"] = raw.loc[split, "volume"] * 4
    return base, raw


def _drop(folder, name: str, frame: pd.DataFrame, day: dt.date) -> None:
    path = folder / name
    frame.to_csv(path, index=False)
    stamp = dt.datetime.combine(day, dt.time(22)).timestamp()  # the source ingests files oldest first
    os.utime(path, (stamp, stamp))


def _meta(instance, asset: str):
    return instance.fetch_materializations(AssetKey(asset), limit=1).records[0].asset_materialization.metadata


@pytest.mark.timeout(300)
def test_nightly_refills_a_late_split_and_a_revised_bar(dagster_instance, sqlite_url, tmp_path, monkeypatch):
    drop = tmp_path / "drop"
    drop.mkdir()
    monkeypatch.setenv("LDTM_PRICE_SOURCE", f"files:{drop}")
    resources = tiny_resources(tmp_path / "home", sqlite_url, universe=",".join(TICKERS))
    engine = get_engine(sqlite_url)
    base, raw = _market()
    market_job, evening_job = defs.resolve_job_def("nightly_market_job"), defs.resolve_job_def("nightly_job")

    def nightly(evening: dt.date):
        market = market_job.execute_in_process(
            instance=dagster_instance,
            resources=resources,
            tags={**_range_tags(TICKERS), EVENING_TAG: str(evening)},
        )
        assert market.success
        return evening_job.execute_in_process(
            instance=dagster_instance, partition_key=str(evening), resources=resources
        )

    # The resources' home: one model per ticker, promoted so the board scores it (candidates are ungated).
    settings = make_settings(tmp_path, sqlite_url)
    for i, t in enumerate(TICKERS):
        promote(engine, make_model(engine, settings, t, seed=i), "test", settings)
    _drop(drop, "history.csv", raw[raw["date"] <= E0], E0)
    assert nightly(E0).success

    _drop(drop, "e1.csv", raw[raw["date"] == E1], E1)
    assert nightly(E1).success
    with engine.connect() as conn:
        filled = conn.execute(
            select(snapshots.c.next_day_pct_error).where(
                snapshots.c.ticker == "AAPL", snapshots.c.run_date == E0
            )
        ).scalar_one()
    assert filled > 200  # the unrecorded split's raw close, filled as AAPL's E1 actual

    # E2: AAPL's last sessions come back-adjusted (a style-2 source after the split), NVDA's E1 bar revised.
    sessions = sorted(raw["date"].unique())
    overlap = [d for d in sessions if d < E1][-4:]
    aapl = raw[(raw["ticker"] == "AAPL") & raw["date"].isin([*overlap, E1, E2])].copy()
    before = aapl["date"] < E1
    aapl.loc[before, LEVELS] = aapl.loc[before, LEVELS] / 4
    nvda = raw[(raw["ticker"] == "NVDA") & raw["date"].isin([E1, E2])].copy()
    nvda.loc[nvda["date"] == E1, LEVELS] = nvda.loc[nvda["date"] == E1, LEVELS] * 1.01
    _drop(drop, "e2.csv", pd.concat([aapl, nvda]), E2)
    run = nightly(E2)
    assert run.success  # was: the blocking audit_chain_intact check failed, fillbacks never ran

    # The split's actual is re-filled by the prices step that records the split, the revised bar's by fillbacks.
    fills = _meta(dagster_instance, "fillbacks")
    assert fills["refilled"].value == 1 and "NVDA" in fills["refills"].value[0]
    with engine.connect() as conn:
        revisions = conn.execute(
            text("SELECT ticker, horizon, old_actual, new_actual, reason FROM fill_revisions")
        ).all()
        rows = conn.execute(
            select(
                snapshots.c.ticker,
                snapshots.c.run_date,
                snapshots.c.run_date_close,
                snapshots.c.next_day_pred,
                snapshots.c.next_day_actual,
                snapshots.c.next_day_pct_error,
            ).where(snapshots.c.run_date.in_([E0, E1]))
        ).all()
    close = base.set_index(["ticker", "date"])["close"]
    assert {(r.ticker, r.horizon) for r in revisions} == {("AAPL", "next_day"), ("NVDA", "next_day")}
    why = {r.ticker: r.reason for r in revisions}
    assert "split" in why["AAPL"] and "revised" in why["NVDA"]
    # What each next-day actual must be on its run date's basis: E0's is the unsplit E1 close (NVDA: the
    # revised one); E1's AAPL row is on the post-split basis of its own run date.
    want = {
        ("AAPL", E0): close["AAPL", E1],
        ("NVDA", E0): close["NVDA", E1] * 1.01,
        ("AAPL", E1): close["AAPL", E2] / 4,
        ("NVDA", E1): close["NVDA", E2],
    }
    got = {(r.ticker, r.run_date): r.next_day_actual for r in rows}
    assert got == pytest.approx(want)
    errors = {t: [] for t in TICKERS}
    for r in rows:
        assert r.next_day_pct_error == pytest.approx(
            (r.next_day_pred - want[r.ticker, r.run_date]) / want[r.ticker, r.run_date] * 100
        )
        errors[r.ticker].append(abs(r.next_day_pct_error))
    board = {
        rec.data["ticker"]: rec.data for rec in _meta(dagster_instance, "leaderboard")["table"].value.records
    }
    for t in TICKERS:
        assert board[t]["n"] == 2
        assert board[t]["next_day_mape"] == pytest.approx(sum(errors[t]) / 2)
    assert board["AAPL"]["next_day_mape"] < 50  # no -75 % day on the board
