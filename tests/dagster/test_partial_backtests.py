"""A weekly training and backtest where one of three tickers fails deterministically: the other two
materialise, get their gate runs and are promoted; the failed one is named in the run's failure and in the alert
(issue 20 item 2, and its "Done when")."""

from __future__ import annotations

import pytest
from dagster import (
    AssetKey,
    AssetRecordsFilter,
    SkipReason,
    build_run_status_sensor_context,
    build_sensor_context,
    materialize,
)
from ldtm_dagster_helpers import TICKERS
from sqlalchemy import delete, select, update

from ldtm_core.learning import registry
from ldtm_core.schema import backtest_folds, features, prices
from ldtm_dagster import assets
from ldtm_dagster.alert_sensors import run_failure_alert
from ldtm_dagster.partitions import RANGE_END, RANGE_START, contiguous_ranges, range_tags
from ldtm_dagster.sensors import promotion_gate_sensor, retrain_backtests_sensor

FAILS = "TSLA"


def _partitions(instance, key: str) -> list[str]:
    records = instance.fetch_materializations(AssetRecordsFilter(asset_key=AssetKey(key)), limit=100).records
    return sorted(r.partition_key for r in records)


def test_one_failing_ticker_does_not_stop_the_others_promotion(
    dagster_instance, backtest_world, webhook, monkeypatch
):
    resources, engine = backtest_world
    tickers = TICKERS.split(",")
    ok = [t for t in tickers if t != FAILS]
    # One of TSLA's closes is 0 (a bad bar): every window over it holds non-finite features, so its
    # training fails every time it runs (its older candidate stays registered).
    with engine.begin() as conn:
        days = conn.execute(
            select(prices.c.date).where(prices.c.ticker == FAILS).order_by(prices.c.date)
        ).scalars()
        day = list(days)[-60]  # inside the training and the backtest folds' windows
        conn.execute(update(prices).where(prices.c.ticker == FAILS, prices.c.date == day).values(close=0.0))
    # Gate thresholds any backtest of the stub model meets, so a gate run means a promotion.
    monkeypatch.setenv("LDTM_GATE_MIN_ACCURACY", "0")
    monkeypatch.setenv("LDTM_GATE_MAX_ERROR_PCT", "50")
    monkeypatch.setenv("LDTM_GATE_POLICY", "seed")  # no minimum evidence: the stub's folds are short

    # The weekly training first: TSLA's training fails, AAPL's and NVDA's candidates are registered
    # and their `checkpoints` partitions materialised; the step fails naming TSLA.
    trained = materialize(
        [assets.checkpoints],
        instance=dagster_instance,
        resources=resources,
        tags=range_tags(tickers),
        raise_on_error=False,
    )
    assert not trained.success
    [failure] = [e for e in trained.all_events if e.is_step_failure]
    assert f"training failed for 1 of 3 ticker(s): {FAILS}: " in failure.step_failure_data.error.message
    assert _partitions(dagster_instance, "checkpoints") == ok

    # Its prices are then withdrawn altogether (a zero close would fail the backtest too, but on a
    # database constraint): TSLA's backtest fails with "no prices for TSLA" every time it runs.
    with engine.begin() as conn:
        conn.execute(delete(features).where(features.c.ticker == FAILS))
        conn.execute(delete(prices).where(prices.c.ticker == FAILS))

    run = materialize(
        [assets.backtests],
        instance=dagster_instance,
        resources=resources,
        tags=range_tags(tickers),  # one single-run backfill over the three partitions, as the weekly loop
        run_config={"ops": {"backtests": {"config": {"folds": 2}}}},
        raise_on_error=False,
    )

    # The run fails, naming the failed ticker and its error ...
    assert not run.success
    [failure] = [e for e in run.all_events if e.is_step_failure]
    message = failure.step_failure_data.error.message
    assert FAILS in message and "prices" in message.lower(), message
    assert not any(t in message.split("failed for")[1].split(";")[0] for t in ok), message
    # ... and the other two tickers' backtests are stored and their partitions materialised.
    with engine.connect() as conn:
        assert sorted(conn.execute(select(backtest_folds.c.ticker).distinct()).scalars()) == ok
    assert _partitions(dagster_instance, "backtests") == ok

    # The promotion sensor fires for exactly those two; their gate runs promote them.
    sensor = promotion_gate_sensor(
        build_sensor_context(
            instance=dagster_instance, resources={k: resources[k] for k in ("store", "database")}
        )
    )
    assert sorted(r.partition_key for r in sensor.run_requests) == ok
    for request in sensor.run_requests:
        # The job's `promotions` step (its `onnx_exports` would export the stub-trained module).
        gate_run = materialize(
            [assets.promotions],
            instance=dagster_instance,
            resources=resources,
            partition_key=request.partition_key,
        )
        assert gate_run.success
    for t in ok:
        assert registry.active_model(engine, t) is not None, t
    assert registry.active_model(engine, FAILS) is None
    assert registry.newest_candidate(engine, FAILS) is not None  # untouched, still waiting

    # The run-failure alert names the failed ticker with its error, and only it.
    run_failure_alert(
        build_run_status_sensor_context(
            sensor_name="run_failure_alert",
            dagster_instance=dagster_instance,
            dagster_run=run.dagster_run,
            dagster_event=run.get_run_failure_event(),
        ).for_run_failure()
    )
    [payload] = webhook
    assert payload["run_id"] == run.run_id
    assert list(payload["failed_tickers"]) == [FAILS] and "prices" in payload["failed_tickers"][FAILS].lower()
    assert FAILS in payload["error"]


def test_a_partly_failed_retrain_backtests_and_promotes_the_tickers_that_trained(
    dagster_instance, backtest_world, monkeypatch
):
    """One `retrain_job`-shaped run (checkpoints -> backtests) where NVDA's training fails: Dagster skips
    the run's backtests steps, and the retrain-failure sensor requests backtests for AAPL and TSLA (two
    runs: they are not contiguous in the universe), whose gate runs then promote them."""
    resources, engine = backtest_world
    tickers = TICKERS.split(",")
    bad = "NVDA"  # the middle key, so the trained ones are two separate ranges
    ok = [t for t in tickers if t != bad]
    with engine.begin() as conn:
        days = list(
            conn.execute(
                select(prices.c.date).where(prices.c.ticker == bad).order_by(prices.c.date)
            ).scalars()
        )
        conn.execute(
            update(prices).where(prices.c.ticker == bad, prices.c.date == days[-60]).values(close=0.0)
        )
    monkeypatch.setenv("LDTM_GATE_MIN_ACCURACY", "0")
    monkeypatch.setenv("LDTM_GATE_MAX_ERROR_PCT", "50")
    # The seed's bar, lowered: the evidence policy's first deployment must beat a coin beyond noise.
    monkeypatch.setenv("LDTM_GATE_POLICY", "seed")
    config = {"ops": {"backtests": {"config": {"folds": 2}}}}

    retrain = materialize(
        [assets.checkpoints, assets.backtests],
        instance=dagster_instance,
        resources=resources,
        tags=range_tags(tickers),
        run_config=config,
        raise_on_error=False,
    )
    assert not retrain.success
    assert _partitions(dagster_instance, "checkpoints") == ok
    assert _partitions(dagster_instance, "backtests") == []  # the run's backtests steps never ran

    def evaluate():
        context = build_run_status_sensor_context(
            sensor_name="retrain_backtests_sensor",
            dagster_instance=dagster_instance,
            dagster_run=retrain.dagster_run,
            dagster_event=retrain.get_run_failure_event(),
        ).for_run_failure()
        return retrain_backtests_sensor(context)

    requests = evaluate()
    assert [(r.tags[RANGE_START], r.tags[RANGE_END]) for r in requests] == [
        ("AAPL", "AAPL"),
        ("TSLA", "TSLA"),
    ]
    assert all(r.job_name == "backtests_job" for r in requests)
    # The run keys are the failed run's: a second evaluation requests nothing new.
    assert [r.run_key for r in evaluate()] == [r.run_key for r in requests]
    assert len({r.run_key for r in requests}) == 2 and all(retrain.run_id in r.run_key for r in requests)

    for request in requests:  # the retrain's backtests config (folds) carries over
        assert request.run_config == config
        run = materialize(
            [assets.backtests],
            instance=dagster_instance,
            resources=resources,
            tags=request.tags,
            run_config=request.run_config,
        )
        assert run.success
    assert _partitions(dagster_instance, "backtests") == ok
    # Once they are backtested, that failure (or a failed re-execution of it) owes nothing more.
    assert isinstance(evaluate(), SkipReason)

    gates = promotion_gate_sensor(
        build_sensor_context(
            instance=dagster_instance, resources={k: resources[k] for k in ("store", "database")}
        )
    )
    assert sorted(r.partition_key for r in gates.run_requests) == ok
    for request in gates.run_requests:
        gate_run = materialize(
            [assets.promotions],
            instance=dagster_instance,
            resources=resources,
            partition_key=request.partition_key,
        )
        assert gate_run.success
    for t in ok:
        assert registry.active_model(engine, t) is not None, t
    assert registry.active_model(engine, bad) is None


def test_owed_tickers_are_cut_into_contiguous_ranges_of_the_universe():
    order = ["AAPL", "NVDA", "TSLA", "QQQ", "SQQQ", "FER"]
    assert contiguous_ranges({"SQQQ", "AAPL", "QQQ", "TSLA"}, order) == [["AAPL"], ["TSLA", "QQQ", "SQQQ"]]
    assert contiguous_ranges(order, order) == [order]
    assert contiguous_ranges([], order) == []
    with pytest.raises(ValueError, match="not in the partition set: ZZZZ"):
        contiguous_ranges(["AAPL", "ZZZZ"], order)
