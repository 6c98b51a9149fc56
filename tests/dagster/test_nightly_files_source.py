"""Done-when of issue 11: LDTM_PRICE_SOURCE=files:<dir> drives the nightly cycle through Dagster.

Drop a file, run the nightly for that evening (its market run: prices -> features, then its
nightly_job: snapshots -> fillbacks -> leaderboard): prices ingested, snapshots written. Next evening's
file arrives: its nightly run writes that evening's snapshots and fills the previous ones back.
"""

import datetime as dt
import os

import pytest
from dagster import AssetKey, materialize
from ldtm_dagster_helpers import TICKERS, tiny_resources
from sqlalchemy import func, select

from ldtm_core.accountability.alerts import operator_alerts
from ldtm_core.data.synthetic_market import generate
from ldtm_core.db import get_engine
from ldtm_core.schema import ingested_files, snapshots
from ldtm_dagster import assets, defs
from ldtm_dagster.partitions import EVENING_TAG
from ldtm_dagster.partitions import range_tags as _range_tags

TICKER_LIST = TICKERS.split(",")
EVENING_1, EVENING_2 = "2024-12-31", "2025-01-02"


def _drop(folder, name, start, end):
    path = folder / name
    bars = generate(TICKER_LIST, "2022-12-01", end, seed=0)  # the generator needs two sessions
    bars[bars["date"] >= dt.date.fromisoformat(start)].to_csv(path, index=False)
    # Distinct modification times: the source ingests files oldest first.
    stamp = dt.datetime.fromisoformat(end).timestamp()
    os.utime(path, (stamp, stamp))


def _snapshot_rows(engine, day):
    with engine.connect() as conn:
        return conn.execute(
            select(snapshots.c.ticker, snapshots.c.mode, snapshots.c.next_day_actual).where(
                snapshots.c.run_date == dt.date.fromisoformat(day)
            )
        ).all()


@pytest.mark.timeout(300)
def test_files_source_drives_two_nightly_runs(dagster_instance, sqlite_url, tmp_path, monkeypatch):
    drop = tmp_path / "drop"
    drop.mkdir()
    monkeypatch.setenv("LDTM_PRICE_SOURCE", f"files:{drop}")
    resources = tiny_resources(tmp_path / "home", sqlite_url)
    engine = get_engine(sqlite_url)

    # History arrives as one file; candidates are trained on it (one run over the ticker range).
    _drop(drop, "history.csv", "2023-01-03", "2024-12-30")
    assert materialize([assets.prices], instance=dagster_instance, resources=resources).success
    assert materialize(
        [assets.checkpoints], instance=dagster_instance, resources=resources, tags=_range_tags(TICKER_LIST)
    ).success

    market_job, evening_job = defs.resolve_job_def("nightly_market_job"), defs.resolve_job_def("nightly_job")

    def nightly(evening: str):
        """What the schedule + nightly_after_market do: the market run, then the evening's run."""
        market = market_job.execute_in_process(
            instance=dagster_instance,
            resources=resources,
            tags={**_range_tags(TICKER_LIST), EVENING_TAG: evening},
        )
        assert market.success
        return evening_job.execute_in_process(
            instance=dagster_instance, partition_key=evening, resources=resources
        )

    # Evening 1: its bar is dropped, the nightly job for that evening runs on the files source.
    _drop(drop, "2024-12-31.csv", EVENING_1, EVENING_1)
    assert nightly(EVENING_1).success
    first = _snapshot_rows(engine, EVENING_1)
    assert sorted(r.ticker for r in first) == sorted(TICKER_LIST)
    assert {r.mode for r in first} == {"live"} and all(r.next_day_actual is None for r in first)
    meta = (
        dagster_instance.fetch_materializations(AssetKey("prices"), limit=1)
        .records[0]
        .asset_materialization.metadata
    )
    assert meta["source"].value == f"files:{drop}" and meta["tickers_failed"].value == 0
    outcomes = {r.data["ticker"]: r.data["status"] for r in meta["outcomes"].value.records}
    assert outcomes == dict.fromkeys(TICKER_LIST, "ok")
    assert not operator_alerts.snapshot_freshness(
        engine, dt.datetime(2024, 12, 31, 21, 30, tzinfo=operator_alerts.MARKET_TZ), dt.time(21)
    ).stale

    # Evening 2: the next file fills evening 1 back and gets its own snapshots.
    _drop(drop, "2025-01-02.csv", EVENING_2, EVENING_2)
    assert nightly(EVENING_2).success
    assert sorted(r.ticker for r in _snapshot_rows(engine, EVENING_2)) == sorted(TICKER_LIST)
    filled = _snapshot_rows(engine, EVENING_1)
    assert all(r.next_day_actual is not None for r in filled)
    bars = generate(TICKER_LIST, EVENING_1, EVENING_2, seed=0)
    closes = bars[bars["date"] == dt.date.fromisoformat(EVENING_2)].set_index("ticker")["close"]
    assert {r.ticker: r.next_day_actual for r in filled} == pytest.approx(closes.to_dict())
    with engine.connect() as conn:  # each file ingested exactly once
        assert conn.execute(select(func.count()).select_from(ingested_files)).scalar() == 3

    # A rerun of evening 2 with no new file is a no-op: nothing re-ingested, no duplicate rows.
    assert nightly(EVENING_2).success
    assert len(_snapshot_rows(engine, EVENING_2)) == len(TICKER_LIST)
