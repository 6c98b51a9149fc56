"""Issue 20 item 8b: every evening's chain heads kept in its own `snapshots` materialization are checked,
and a mismatch blocks. Before, only the latest materialization was compared, as a WARN: a consistent
rewrite of `snapshots` plus `run_log` (no HMAC key) was flagged for one evening and then became the
baseline the next evening compared against."""

import datetime as dt
import json

import pytest
from accountability_helpers import ingest, make_model, make_settings
from dagster import AssetCheckKey, AssetKey, AssetMaterialization, materialize
from dagster._core.storage.asset_check_execution_record import AssetCheckExecutionRecordStatus
from ldtm_dagster_helpers import tiny_resources
from sqlalchemy import select, text, update

from ldtm_core.accountability.ledger.chain import AUDIT_KEY_ENV, row_hash
from ldtm_core.db import get_engine, lift_append_only
from ldtm_core.schema import run_log, snapshots
from ldtm_dagster import assets


@pytest.fixture
def aapl_store(sqlite_url, tmp_path, monkeypatch):
    """(engine, prices, resources): AAPL's prices and an active model, resources on that store, no audit key."""
    monkeypatch.delenv(AUDIT_KEY_ENV, raising=False)
    engine = get_engine(sqlite_url)
    df = ingest(engine, ["AAPL"], start="2024-01-02", end="2024-06-28")
    make_model(engine, make_settings(tmp_path, sqlite_url), "AAPL")
    return engine, df, tiny_resources(tmp_path / "home", sqlite_url, universe="AAPL")


def _rewrite_everything(engine) -> None:
    """A consistent forgery without the key: predictions edited, every hash and run_log anchor redone."""
    lift_append_only(engine)  # rewrites the record on purpose: SQLite's append-only triggers off
    with engine.begin() as conn:
        conn.execute(text("UPDATE snapshots SET next_day_pred = next_day_pred * 1.5"))
        prev = ""
        for r in conn.execute(select(snapshots).order_by(snapshots.c.id)).mappings().all():
            h = row_hash(prev, r)
            conn.execute(
                update(snapshots).where(snapshots.c.id == r["id"]).values(prev_hash=prev, row_hash=h)
            )
            prev = h
        heads = {r.id: r for r in conn.execute(select(snapshots)).all()}
        for run_id, blob in conn.execute(select(run_log.c.run_id, run_log.c.chain_heads_json)).all():
            if blob:
                anchor = json.loads(blob)
                for t, head in anchor["heads"].items():
                    row = heads[head[0]]
                    anchor["heads"][t] = [row.id, row.row_hash, str(row.run_date), row.model_version]
                conn.execute(
                    update(run_log)
                    .where(run_log.c.run_id == run_id)
                    .values(chain_heads_json=json.dumps(anchor))
                )


@pytest.mark.timeout(300)
def test_a_consistent_rewrite_blocks_every_later_evening(dagster_instance, aapl_store):
    engine, df, resources = aapl_store
    evenings = [str(d) for d in sorted(df["date"].unique())[-4:]]

    def evening(key: str):
        return materialize(
            [assets.snapshots],
            partition_key=key,
            instance=dagster_instance,
            resources=resources,
            raise_on_error=False,
        )

    for key in evenings[:2]:
        assert evening(key).success
    _rewrite_everything(engine)
    check = AssetCheckKey(AssetKey("snapshots"), "chain_matches_dagster_anchors")
    for key in evenings[2:]:  # not only the evening after the rewrite: every later one
        result = evening(key)
        assert not result.success
        [evaluation] = [e for e in result.get_asset_check_evaluations() if e.asset_check_key == check]
        assert not evaluation.passed
        flagged = {p["run_date"] for p in evaluation.metadata["problems"].value}
        # The nightly audit is incremental (docs/architecture.md): it checks the heads of the last audit
        # that passed (the second evening's), which the rewrite changed; the weekly full audit lists all.
        assert str(dt.date.fromisoformat(evenings[1])) in flagged
    record = dagster_instance.event_log_storage.get_latest_asset_check_execution_by_key([check])[check]
    assert record.status == AssetCheckExecutionRecordStatus.FAILED


@pytest.mark.timeout(300)
def test_the_anchors_are_read_back_to_the_newest_verified_evening_only(
    dagster_instance, aapl_store, monkeypatch
):
    """Issue 31: an evening reads the earlier materializations newest first and stops at the newest one
    whose chain checks passed (its heads cover every row before them through the chain): with 300 such
    evenings stored, one page is read, not 300 records, and the check still compares and passes."""
    engine, df, resources = aapl_store
    first, second = [str(d) for d in sorted(df["date"].unique())[-2:]]
    run = materialize([assets.snapshots], partition_key=first, instance=dagster_instance, resources=resources)
    [event] = run.get_asset_materialization_events()
    metadata = event.materialization.metadata
    assert metadata[assets.accountability.CHAIN_VERIFIED].value is True
    for _ in range(300):  # earlier verified evenings (their heads: the same chain's, so all still match)
        dagster_instance.report_runless_asset_event(
            AssetMaterialization("snapshots", partition=first, metadata=dict(metadata))
        )
    fetched = []
    real = dagster_instance.fetch_materializations

    def spy(*args, **kwargs):
        page = real(*args, **kwargs)
        if "cursor" in kwargs:  # the anchors' pages (Dagster itself asks for the latest one, limit 1)
            fetched.extend(page.records)
        return page

    monkeypatch.setattr(dagster_instance, "fetch_materializations", spy)
    result = materialize(
        [assets.snapshots], partition_key=second, instance=dagster_instance, resources=resources
    )
    check = AssetCheckKey(AssetKey("snapshots"), "chain_matches_dagster_anchors")
    [evaluation] = [e for e in result.get_asset_check_evaluations() if e.asset_check_key == check]
    assert evaluation.passed and evaluation.metadata["anchors_compared"].value == 1
    assert 0 < len(fetched) <= assets.accountability.PAGE
