"""What a partly failed retrain still owes: the backtests of the tickers whose training succeeded.

Inside one `retrain_job` run, a `checkpoints` step that failed for some tickers (after materialising
the others, `chunk_fanout.summarise_chunks`) makes Dagster skip every `backtests` step of that run, so the
tickers that trained fine would get no backtest, and so no gate run, until someone launched one.
`sensors.retrain_backtests_sensor` asks for those backtests from here, one run per contiguous key
range of the ticker partitions (a run covers one contiguous range, DAGSTER_NOTES.md).
"""

from __future__ import annotations

from dagster import AssetKey, AssetRecordsFilter, DagsterEventType, DagsterInstance, DagsterRun, RunRequest

from .chunk_fanout import run_started_at
from .jobs import backtests_job
from .partitions import contiguous_ranges, range_tags, ticker_partitions

CHECKPOINTS = "checkpoints"
BACKTESTS = "backtests"


def _materialised(instance: DagsterInstance, run_id: str) -> dict[str, set[str]]:
    """{asset name: partitions} this run materialised."""
    done: dict[str, set[str]] = {}
    for entry in instance.all_logs(run_id, of_type=DagsterEventType.ASSET_MATERIALIZATION):
        m = entry.asset_materialization
        if m is not None and m.partition:
            done.setdefault(m.asset_key.to_user_string(), set()).add(m.partition)
    return done


def _backtests_started(instance: DagsterInstance, run_id: str) -> bool:
    """Whether any step of the run's `backtests` graph ran: then its failures are its own (a
    re-request would fail again for a deterministic one), and nothing is owed."""
    return any(
        (e.step_key or "").startswith(f"{BACKTESTS}.")
        for e in instance.all_logs(run_id, of_type=DagsterEventType.STEP_START)
    )


def owed_backtests(instance: DagsterInstance, run_id: str) -> list[str]:
    """Tickers whose checkpoints this run materialised (trained, or skipped as trained earlier in its
    re-execution group) and that have no `backtests` materialization since the group began, in
    partition order; [] when the run's backtests steps ran at all."""
    if _backtests_started(instance, run_id):
        return []
    trained = _materialised(instance, run_id).get(CHECKPOINTS, set())
    if not trained:
        return []
    # Since the group's root run began: a re-execution's skipped tickers were often backtested after
    # the earlier failure already, while one whose first run crashed before its fan-in never was.
    since = run_started_at(instance, run_id).timestamp()
    backtested = {
        r.partition_key
        for r in instance.fetch_materializations(
            AssetRecordsFilter(
                asset_key=AssetKey(BACKTESTS), asset_partitions=sorted(trained), after_timestamp=since
            ),
            limit=len(trained) * 10,
        ).records
    }
    # A key dropped from the universe since the run cannot be a partition of a new run.
    return [t for t in ticker_partitions.get_partition_keys() if t in trained - backtested]


def backtest_requests(instance: DagsterInstance, run: DagsterRun) -> list[RunRequest]:
    """One backtests run per contiguous range of the owed tickers, with the failed run's `backtests`
    config (folds, warm start); the run key names the failed run and the range, so each is launched
    once however often the sensor evaluates that failure."""
    owed = owed_backtests(instance, run.run_id)
    config = (run.run_config or {}).get("ops", {}).get(BACKTESTS)
    run_config = {"ops": {BACKTESTS: config}} if config else {}
    return [
        RunRequest(
            job_name=backtests_job.name,
            run_key=f"retrain-backtests:{run.run_id}:{keys[0]}...{keys[-1]}",
            run_config=run_config,
            tags={**range_tags(keys), "ldtm/after_failed_retrain": run.run_id},
        )
        for keys in contiguous_ranges(owed, ticker_partitions.get_partition_keys())
    ]
