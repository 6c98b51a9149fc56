"""The whole graph materialises through Dagster (the demo's path) on SQLite, and on PostgreSQL for
both the application database and the Dagster instance storage."""

import datetime as dt
import os
import re
import uuid

import pytest
import yaml
from dagster import (
    AssetCheckKey,
    AssetKey,
    AssetRecordsFilter,
    PartitionKeyRange,
    build_run_status_sensor_context,
    instance_for_test,
    materialize,
)
from dagster._core.storage.asset_check_execution_record import AssetCheckExecutionRecordStatus
from dagster._core.storage.tags import ASSET_PARTITION_RANGE_END_TAG, ASSET_PARTITION_RANGE_START_TAG
from ldtm_dagster_helpers import REPO, TICKERS, tiny_resources
from sqlalchemy import create_engine, func, select, text
from sqlalchemy.engine import make_url

from ldtm_core.data import calendar
from ldtm_core.db import get_engine
from ldtm_core.learning.registry import EXTERNAL
from ldtm_core.schema import backtest_folds, model_registry, prices, snapshots
from ldtm_dagster import assets, defs
from ldtm_dagster.demo import ALL_ASSETS, run_demo
from ldtm_dagster.partitions import EVENING_TAG, evening_partitions
from ldtm_dagster.sensors import nightly_after_market

START, END, EVENINGS = "2023-01-03", "2024-12-31", 8
CHECKS = [
    ("prices", "prices_ohlc_consistent"),
    ("features", "features_current"),
    ("features", "features_finite"),
    ("features", "features_rsi_in_range"),
    ("features", "features_match_recomputation"),
    ("backtests", "no_leakage"),
    ("snapshots", "one_per_ticker"),
    ("snapshots", "audit_chain_intact"),
    ("snapshots", "chain_matches_dagster_anchors"),
]


def _range_tags(keys: list[str]) -> dict:
    return {ASSET_PARTITION_RANGE_START_TAG: keys[0], ASSET_PARTITION_RANGE_END_TAG: keys[-1]}


def _latest_metadata(instance, key: str) -> dict:
    record = instance.fetch_materializations(AssetKey(key), limit=1).records[0]
    return record.asset_materialization.metadata


def conn_count(engine, ticker: str) -> int:
    with engine.connect() as conn:
        return conn.execute(select(func.count()).where(prices.c.ticker == ticker)).scalar()


def _materialized_partitions(instance, key: str) -> set:
    return instance.get_materialized_partitions(AssetKey(key))


@pytest.fixture(autouse=True)
def _seed_gate_policy(monkeypatch):
    """The graph's tiny coin-like models are rightly refused by the evidence gate; these tests follow the
    whole graph through promotion, exports and a production board, so the seed's absolute bar decides
    here (the evidence gate has its own tests: test_gate*.py, test_champion_challenger.py)."""
    monkeypatch.setenv("LDTM_GATE_POLICY", "seed")


def _run_whole_graph(instance, resources) -> None:
    tickers = TICKERS.split(",")
    table = run_demo(instance, resources, start=START, end=END, replay_sessions=EVENINGS, log=lambda _m: None)
    engine = get_engine(resources["database"].resolved_url(resources["store"]))

    # Dagster saw every asset; the ticker assets per partition, the evenings per partition.
    for key in ("prices", "fillbacks", "leaderboard"):
        assert instance.fetch_materializations(AssetKey(key), limit=1).records, key
    for key in ("features", "checkpoints", "backtests", "promotions", "onnx_exports"):
        assert _materialized_partitions(instance, key) == set(tickers), key
    # The range run covers every evening partition in it; weekday holidays record "no session".
    partitions = sorted(_materialized_partitions(instance, "snapshots"))
    evenings = [e for e in partitions if calendar.is_session(e)]
    assert len(evenings) == EVENINGS
    assert partitions == evening_partitions.get_partition_keys_in_range(
        PartitionKeyRange(evenings[0], evenings[-1])
    )
    # Each multi-partition step ran as ONE run (single-run backfill policy).
    assert (
        len({r.run_id for r in instance.fetch_materializations(AssetKey("checkpoints"), limit=10).records})
        == 1
    )
    # The chunk steps log each finished ticker with the run's n/N (and an ETA while some are left).
    for key, counted in (("checkpoints", "trained"), ("backtests", "backtested")):
        run_id = instance.fetch_materializations(AssetKey(key), limit=1).records[0].run_id
        counts = [
            tuple(map(int, m.groups()))
            for e in instance.all_logs(run_id)
            if (m := re.search(rf"\(run: (\d+)/(\d+) {counted}", e.user_message or ""))
        ]
        assert len(counts) == len(tickers) and max(counts) == (len(tickers), len(tickers)), (key, counts)
    for asset_key, name in CHECKS:
        record = instance.event_log_storage.get_latest_asset_check_execution_by_key(
            [AssetCheckKey(AssetKey(asset_key), name)]
        )[AssetCheckKey(AssetKey(asset_key), name)]
        assert record.status == AssetCheckExecutionRecordStatus.SUCCEEDED, (asset_key, name)

    with engine.connect() as conn:
        # An LSTM per ticker, the demo's submitted model (demo-desk) for each, and the demo's last step: one
        # ridge fit, a candidate per ticker.
        profiles = conn.execute(
            select(model_registry.c.profile, func.count()).group_by(model_registry.c.profile)
        )
        assert dict(profiles.all()) == {"demo": len(tickers), EXTERNAL: len(tickers), "ridge": len(tickers)}
        assert conn.execute(select(func.sum(backtest_folds.c.leakage_rows))).scalar() == 0
        s = snapshots.c
        rows = conn.execute(select(s.ticker, s.run_date, s.mode).where(s.model_status != EXTERNAL)).all()
        desk = conn.execute(select(s.mode).where(s.model_status == EXTERNAL)).scalars().all()
    # The desk's file was recorded late: replays only, never live.
    assert desk and set(desk) == {"replay"}
    # One row per ticker per evening; every evening but the newest is a replay.
    assert sorted((r.ticker, str(r.run_date)) for r in rows) == sorted(
        (t, e) for t in tickers for e in evenings
    )
    assert {r.mode for r in rows if str(r.run_date) < evenings[-1]} == {"replay"}
    assert {r.mode for r in rows if str(r.run_date) == evenings[-1]} == {"live"}

    # The board ranks gated models only; a ticker whose candidate the gate held is hidden and named.
    meta = _latest_metadata(instance, "leaderboard")
    hidden = meta["ungated_hidden"].value
    assert sorted(table["ticker"]) == sorted(set(tickers) - set(hidden)) and table["gated"].all()
    with engine.connect() as conn:
        active = conn.execute(select(model_registry.c.ticker).where(model_registry.c.status == "active"))
        assert sorted(hidden) == sorted(set(tickers) - set(active.scalars()))
    assert meta["tickers"].value == len(tickers) - len(hidden)
    assert "data:image/png;base64," in meta["plot"].value
    assert meta["table"].value.records and "always_up_accuracy" in meta["table"].value.records[0].data
    # Each horizon's error with the count it rests on; the in-sample evenings the board leaves out.
    assert {"one_month_mape", "one_month_n", "persistence_n"} <= set(meta["table"].value.records[0].data)
    assert meta["in_sample_hidden"].value >= 0
    summary = _latest_metadata(instance, "checkpoints")["summary"].value.records
    assert sorted(r.data["ticker"] for r in summary) == sorted(tickers)
    assert {r.data["status"] for r in summary} == {"trained"}
    assert all(r.data["epochs"] == 1 for r in summary)  # the resource's max_epochs override reached training
    # Training, backtests and inference read the stored features (prices unchanged since the build).
    assert {r.data["features"] for r in summary} == {"stored"}
    backtested = _latest_metadata(instance, "backtests")["summary"].value.records
    assert {r.data["features"] for r in backtested} == {"stored"}
    evenings_run = _latest_metadata(instance, "snapshots")["runs"].value.records
    assert {r.data["features_recomputed"] for r in evenings_run if r.data["status"] != "no session"} == {""}
    # Per-partition metadata of the features asset.
    record = instance.fetch_materializations(
        AssetRecordsFilter(asset_key=AssetKey("features"), asset_partitions=[tickers[0]]), limit=1
    ).records[0]
    meta = record.asset_materialization.metadata
    prices_rows = conn_count(engine, tickers[0])
    assert meta["rows"].value + meta["warmup_rows"].value == meta["price_rows"].value == prices_rows
    assert meta["fingerprint"].value.startswith(f"rows={prices_rows};")
    rsi = next(r.data for r in meta["feature_stats"].value.records if r.data["feature"] == "rsi_14")
    assert 0 <= rsi["min"] <= rsi["mean"] <= rsi["max"] <= 100
    fills = _latest_metadata(instance, "fillbacks")
    # Each ticker's published row and demo-desk's (recorded late) row of every evening whose next day closed.
    assert fills["filled_next_day"].value == 2 * len(tickers) * (EVENINGS - 1)

    # A weekday holiday partition records "no session" and writes nothing.
    holiday = "2024-12-25"
    assert not calendar.is_session(holiday)
    result = materialize(
        ALL_ASSETS,
        selection=[assets.snapshots],
        partition_key=holiday,
        instance=instance,
        resources=resources,
    )
    assert result.success
    runs = _latest_metadata(instance, "snapshots")["runs"].value.records
    assert [(r.data["run_date"], r.data["status"], r.data["rows_written"]) for r in runs] == [
        (holiday, "no session", 0)
    ]
    with engine.connect() as conn:
        assert (
            conn.execute(select(func.count()).where(snapshots.c.run_date == dt.date(2024, 12, 25))).scalar()
            == 0
        )


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_whole_graph_on_sqlite_then_a_nightly_run(dagster_instance, sqlite_url, tmp_path):
    resources = tiny_resources(tmp_path / "home", sqlite_url)
    _run_whole_graph(dagster_instance, resources)

    # The nightly for the next evening (2025-01-02): one run of prices through that day and the features
    # of every ticker; its success launches nightly_job for the evening: live rows for it, and the
    # previous evening's next-day actuals filled in.
    evening = "2025-01-02"
    market = defs.resolve_job_def("nightly_market_job").execute_in_process(
        instance=dagster_instance,
        resources=resources,
        tags={**_range_tags(TICKERS.split(",")), EVENING_TAG: evening},
        run_config={"ops": {"prices": {"config": {"start": START, "end": evening}}}},
    )
    assert market.success
    features_meta = _latest_metadata(dagster_instance, "features")
    assert features_meta["appended"].value == len(TICKERS.split(","))  # one new session each
    request = nightly_after_market(
        build_run_status_sensor_context(
            sensor_name="nightly_after_market",
            dagster_event=market.get_run_success_event(),
            dagster_instance=dagster_instance,
            dagster_run=market.dagster_run,
        )
    )
    assert request.partition_key == evening
    result = defs.resolve_job_def("nightly_job").execute_in_process(
        instance=dagster_instance, partition_key=request.partition_key, resources=resources
    )
    assert result.success
    assert result.dagster_run.tags.get("ldtm/gpu") == "true"
    [run] = _latest_metadata(dagster_instance, "snapshots")["runs"].value.records
    assert run.data["features_recomputed"] == ""  # the evening read the features the market run stored
    engine = get_engine(sqlite_url)
    with engine.connect() as conn:
        modes = (
            conn.execute(select(snapshots.c.mode).where(snapshots.c.run_date == dt.date(2025, 1, 2)))
            .scalars()
            .all()
        )
        unfilled = conn.execute(
            select(func.count()).where(
                snapshots.c.run_date == dt.date(2024, 12, 31), snapshots.c.next_day_actual.is_(None)
            )
        ).scalar()
    assert modes == ["live"] * len(TICKERS.split(","))
    assert unfilled == 0


@pytest.fixture
def dagster_pg_env(pg_server_url, monkeypatch):
    """A fresh PostgreSQL database for Dagster's instance storage, named by the DAGSTER_PG_* switch."""
    admin = make_url(pg_server_url).set(database="postgres")
    name = f"ldtm_dagster_{uuid.uuid4().hex[:10]}"
    admin_engine = create_engine(admin, isolation_level="AUTOCOMMIT")
    with admin_engine.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    monkeypatch.setenv("DAGSTER_PG_USERNAME", admin.username or "postgres")
    monkeypatch.setenv("DAGSTER_PG_PASSWORD", admin.password or "")
    monkeypatch.setenv("DAGSTER_PG_HOST", admin.host or "127.0.0.1")
    monkeypatch.setenv("DAGSTER_PG_PORT", str(admin.port or 5432))
    monkeypatch.setenv("DAGSTER_PG_DB", name)
    yield name
    with admin_engine.connect() as conn:
        conn.execute(
            text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = :n"), {"n": name}
        )
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}"'))
    admin_engine.dispose()


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_whole_graph_on_postgres_app_db_and_instance_storage(pg_url, dagster_pg_env, tmp_path):
    config = yaml.safe_load((REPO / "deploy/postgres/dagster.yaml").read_text())
    with instance_for_test(overrides=config) as instance:
        storage = type(instance.event_log_storage).__name__
        assert storage == "PostgresEventLogStorage", storage
        _run_whole_graph(instance, tiny_resources(tmp_path / "home", pg_url))
        # The runs really are in PostgreSQL.
        pg = make_url(pg_url).set(database=os.environ["DAGSTER_PG_DB"])
        with create_engine(pg).connect() as conn:
            assert conn.execute(text("SELECT count(*) FROM runs")).scalar() >= 6
