"""gpu_pool_sensor follows free VRAM on a real instance; promotion_gate_sensor fires once per
backtest partition materialization."""

from __future__ import annotations

import subprocess

import pytest
from dagster import (
    AssetKey,
    SkipReason,
    build_run_status_sensor_context,
    build_sensor_context,
    job,
    materialize,
    op,
)
from ldtm_dagster_helpers import TICKERS, FakeGpuProbe, FakeNVML
from sqlalchemy import select

from ldtm_core.learning import gpu_slots
from ldtm_core.schema import backtest_folds
from ldtm_dagster import assets, defs
from ldtm_dagster.gpu_pool import GPU_POOL
from ldtm_dagster.partitions import EVENING_TAG, range_tags
from ldtm_dagster.sensors import gpu_pool_sensor, nightly_after_market, promotion_gate_sensor


def _limit(instance) -> int:
    info = instance.event_log_storage.get_concurrency_info(GPU_POOL)
    assert not info.using_default_limit
    return info.slot_count


def _tick(instance):
    return gpu_pool_sensor(build_sensor_context(instance=instance, resources={"gpu": FakeGpuProbe()}))


def test_a_co_tenant_taking_memory_lowers_the_pool_on_the_next_tick(dagster_instance, fake_nvml, monkeypatch):
    monkeypatch.setattr(gpu_slots, "cpu_count", lambda: 16)  # a GPU host's cores: VRAM decides here
    # One 24 GiB card with 8 GiB free: floor((8192 - 1024) / 600) = 11 slots.
    fake_nvml["module"] = FakeNVML([("RTX", 24576, 8192)])
    _tick(dagster_instance)
    assert _limit(dagster_instance) == 11
    # Another tenant takes 5 GiB: floor((3072 - 1024) / 600) = 3.
    fake_nvml["module"] = FakeNVML([("RTX", 24576, 3072)])
    result = _tick(dagster_instance)
    assert _limit(dagster_instance) == 3
    assert "11 -> 3" in result.skip_message
    # Two cards add up.
    fake_nvml["module"] = FakeNVML([("A", 24576, 3072), ("B", 24576, 2224)])
    _tick(dagster_instance)
    assert _limit(dagster_instance) == 3 + 2


def test_the_pool_limit_counts_its_own_running_steps_as_available(dagster_instance, fake_nvml, monkeypatch):
    monkeypatch.setattr(gpu_slots, "cpu_count", lambda: 16)  # a GPU host's cores: VRAM decides here
    # A process started from here inherits the code location's pool marker, like a run's step process;
    # `sleep` stands in for a step holding 600 MiB of the card.
    steps = [subprocess.Popen(["sleep", "60"]) for _ in range(4)]
    try:
        fake_nvml["module"] = FakeNVML([("L4", 23034, 6000)])
        _tick(dagster_instance)
        assert _limit(dagster_instance) == 8  # floor((6000 - 1024) / 600)
        held = {0: [(p.pid, 600) for p in steps]}
        fake_nvml["module"] = FakeNVML([("L4", 23034, 6000 - 4 * 600)], processes=held)
        result = _tick(dagster_instance)
        assert _limit(dagster_instance) == 8 and "unchanged at 8" in result.skip_message
    finally:
        for p in steps:
            p.kill()
            p.wait()


@pytest.mark.parametrize("nvml", [FakeNVML([], broken=True), FakeNVML([]), FakeNVML([("RTX", 8192, 900)])])
def test_without_a_usable_gpu_the_pool_is_sized_from_cores(dagster_instance, fake_nvml, nvml):
    fake_nvml["module"] = nvml
    result = _tick(dagster_instance)
    assert _limit(dagster_instance) == 2  # cpu_count is 2 in these tests
    assert "(cpu)" in result.skip_message


def _materialize(instance, world, ticker: str) -> None:
    resources, _ = world
    result = materialize(
        [assets.backtests],
        partition_key=ticker,
        instance=instance,
        resources=resources,
        run_config={"ops": {"backtests": {"config": {"folds": 2}}}},
    )
    assert result.success


def _evaluate(instance, cursor, world):
    resources = {k: world[0][k] for k in ("store", "database")}  # the sensor reads gate decisions
    result = promotion_gate_sensor(
        build_sensor_context(instance=instance, cursor=cursor, resources=resources)
    )
    return result.run_requests or [], result.cursor


def test_promotion_sensor_one_request_per_backtest_partition(dagster_instance, backtest_world):
    tickers = TICKERS.split(",")
    requests, cursor = _evaluate(dagster_instance, None, backtest_world)
    assert requests == []

    for t in tickers:  # three tickers land between two ticks
        _materialize(dagster_instance, backtest_world, t)
    _, engine = backtest_world
    with engine.connect() as conn:  # the real asset ran the real backtest for each partition
        assert sorted(conn.execute(select(backtest_folds.c.ticker).distinct()).scalars()) == sorted(tickers)
    requests, cursor = _evaluate(dagster_instance, cursor, backtest_world)
    assert sorted(r.partition_key for r in requests) == sorted(tickers)
    assert len({r.run_key for r in requests}) == 3
    assert [r.job_name for r in requests] == ["promotion_job"] * 3

    again, cursor = _evaluate(dagster_instance, cursor, backtest_world)
    assert again == []

    _materialize(dagster_instance, backtest_world, tickers[1])
    new, cursor = _evaluate(dagster_instance, cursor, backtest_world)
    assert [r.partition_key for r in new] == [tickers[1]]
    assert new[0].run_key not in {r.run_key for r in requests}


def test_promotion_sensor_run_keys_dedupe_a_reevaluation_from_an_old_cursor(dagster_instance, backtest_world):
    t = TICKERS.split(",")[0]
    _materialize(dagster_instance, backtest_world, t)
    first, _ = _evaluate(dagster_instance, None, backtest_world)
    replay, _ = _evaluate(
        dagster_instance, None, backtest_world
    )  # e.g. a lost cursor: same keys, so the daemon skips them
    assert [r.run_key for r in first] == [r.run_key for r in replay]
    record = dagster_instance.fetch_materializations(AssetKey("backtests"), limit=1).records[0]
    assert first[0].run_key == f"{t}:{record.storage_id}"


def test_make_dev_after_make_demo_judges_no_backtest_again(
    dagster_instance, backtest_world, webhook, monkeypatch
):
    """`make demo` backtests and gates every ticker in its own runs; `make dev` then starts the daemon,
    whose promotion sensor has no cursor yet: it must not launch gate runs for backtests already judged
    (before: one per materialization, re-failing and re-notifying every held candidate)."""
    resources, engine = backtest_world
    tickers = TICKERS.split(",")[:2]  # two contiguous partitions keep it short
    monkeypatch.setenv("LDTM_GATE_MAX_ERROR_PCT", "0")  # every candidate is held: a notice each
    demo = materialize(
        [assets.backtests],
        instance=dagster_instance,
        resources=resources,
        tags=range_tags(tickers),
        run_config={"ops": {"backtests": {"config": {"folds": 2}}}},
    )
    assert demo.success
    gated = materialize(
        [assets.promotions], instance=dagster_instance, resources=resources, tags=range_tags(tickers)
    )
    assert gated.success and len(webhook) == 2
    # Issue 21: each gate row states its decision with the rule, the rows, and the model beside
    # always-up, persistence and the trailing majority on the same rows, with the p-values.
    for row in gated.asset_materializations_for_node("promotions")[0].metadata["summary"].value.records:
        d = row.data
        assert d["decision"] in ("held", "insufficient evidence") and d["rule"].startswith("evidence policy")
        assert d["n"] > 0 and 0 <= d["trend_accuracy"] <= 1 and 0 <= d["persistence_accuracy"] <= 1
        assert (
            0 < d["trend_p_value"] <= 1 and 0 < d["persistence_p_value"] <= 1 and 0 < d["skill_p_value"] <= 1
        )
    # The gate reports as Markdown in the run's metadata: the table, the evidence and the rule.
    md = gated.asset_materializations_for_node("promotions")[0].metadata["gate_reports"].value
    assert md.count("| direction accuracy |") == 2 and "rule: evidence policy" in md and "failing:" in md
    for notice in webhook:  # the notification carries the same table
        assert notice["rule"].startswith("evidence policy") and set(notice["baselines"]) == {
            "always_up",
            "persistence",
            "trend",
        }
        assert notice["baselines"]["trend"]["p_value"] is not None

    requests, cursor = _evaluate(dagster_instance, None, backtest_world)  # the daemon's first tick
    assert requests == []
    # A gate run launched anyway (by hand) judges nothing again and posts nothing.
    again = defs.resolve_job_def("promotion_job").execute_in_process(
        instance=dagster_instance, resources=resources, partition_key=tickers[0]
    )
    assert again.success and len(webhook) == 2
    [row] = again.asset_materializations_for_node("promotions")[0].metadata["summary"].value.records
    assert row.data["decision"] == "already judged"
    # (A new backtest is judged as before: tests/test_gate.py::test_a_backtest_already_judged_...)


# --- nightly_after_market: the evening run follows its market run -------------------------------------


@op
def _noop() -> None:
    return None


@job
def _stand_in_market_job():
    _noop()


def _after(instance, tags: dict):
    run = _stand_in_market_job.execute_in_process(instance=instance, tags=tags)
    context = build_run_status_sensor_context(
        sensor_name="nightly_after_market",
        dagster_event=run.get_run_success_event(),
        dagster_instance=instance,
        dagster_run=run.dagster_run,
    )
    return nightly_after_market(context), run.dagster_run.run_id


def test_a_market_run_for_an_evening_launches_that_evenings_nightly_job(dagster_instance):
    request, run_id = _after(dagster_instance, {EVENING_TAG: "2025-03-11"})
    assert request.partition_key == "2025-03-11"
    assert request.run_key == f"nightly:2025-03-11:{run_id}"
    assert [j.name for j in nightly_after_market._monitored_jobs] == [
        "nightly_market_job"
    ]  # no public accessor
    assert nightly_after_market.job_name == "nightly_job"


def test_a_market_run_started_by_hand_launches_nothing(dagster_instance):
    skip, _ = _after(dagster_instance, {})
    assert isinstance(skip, SkipReason) and EVENING_TAG in skip.skip_message
