"""Issue 38: which failed runs the compose instance's run_retries re-executes, and how many failure
alerts one logical failure posts. No daemon: Dagster's own retry decision (`dagster/will_retry`, set as
the failure is recorded, read by auto_run_reexecution.filter_runs_to_should_retry) and the alert sensor
are called directly, on an instance with deploy/docker/dagster.yaml's run_retries.

- A run whose resource setup refuses a configured value (the probe: `{env: LDTM_AUDIT_KEY}` read into
  `store.universe`) fails with RUN_EXCEPTION, which Dagster retries like a crash unless the run says
  `dagster/max_retries=0`: it must not be retried, and it alerts once.
- A run whose worker was killed (run monitoring marks it failed) is still retried once; its failure is
  not posted while the retry is pending, the retry's failure is: one alert, naming the retry."""

from __future__ import annotations

from pathlib import Path

import pytest
from dagster import (
    DagsterEventType,
    DagsterRunStatus,
    Definitions,
    asset,
    build_reconstructable_job,
    build_run_status_sensor_context,
    define_asset_job,
    execute_job,
    instance_for_test,
    materialize,
)
from dagster._core.storage.tags import (
    AUTO_RETRY_RUN_ID_TAG,
    MAX_RETRIES_TAG,
    PARENT_RUN_ID_TAG,
    RETRY_NUMBER_TAG,
    ROOT_RUN_ID_TAG,
    RUN_FAILURE_REASON_TAG,
    TAGS_TO_MAYBE_OMIT_ON_RETRY,
    WILL_RETRY_TAG,
)
from dagster._daemon.auto_run_reexecution.auto_run_reexecution import filter_runs_to_should_retry
from ldtm_dagster_helpers import repo_instance_config, tiny_resources

from ldtm_dagster.alert_sensors import run_failure_alert
from ldtm_dagster.assets import prices
from ldtm_dagster.resources import ArtifactStore

HERE = str(Path(__file__).resolve().parent)
COMPOSE_RUN_RETRIES = repo_instance_config("deploy/docker/dagster.yaml")["run_retries"]
SECRET = "k3y-Of-The-Chain-9f2c"
# The probe's run config: a resource field filled from the audit key (not a universe).
UNIVERSE_FROM_AUDIT_KEY = {"universe": {"env": "LDTM_AUDIT_KEY"}}


@pytest.fixture
def instance():
    """The repository's instance with the compose deployment's run_retries (enabled, 1 retry, none on
    asset/op failures)."""
    assert COMPOSE_RUN_RETRIES == {"enabled": True, "max_retries": 1, "retry_on_asset_or_op_failure": False}
    with instance_for_test(overrides={**repo_instance_config(), "run_retries": COMPOSE_RUN_RETRIES}) as inst:
        yield inst


def _alert(instance, run_id: str) -> None:
    """One evaluation of the failure alert for this failed run, as the sensor daemon makes it."""
    run = instance.get_run_by_id(run_id)
    [failure] = instance.all_logs(run_id, of_type=DagsterEventType.PIPELINE_FAILURE)
    context = build_run_status_sensor_context(
        sensor_name="run_failure_alert",
        dagster_instance=instance,
        dagster_run=run,
        dagster_event=failure.get_dagster_event(),
    ).for_run_failure()
    run_failure_alert(context)


def _retried(instance, run_id: str) -> list[str]:
    """The run ids the auto-run-reexecution daemon would re-execute among these."""
    return [r.run_id for r in filter_runs_to_should_retry([instance.get_run_by_id(run_id)], instance)]


def test_a_resource_config_failure_is_not_retried_and_alerts_once(
    instance, webhook, sqlite_url, tmp_path, monkeypatch
):
    monkeypatch.setenv("LDTM_AUDIT_KEY", SECRET)
    result = materialize(
        [prices],
        resources=tiny_resources(tmp_path / "home", sqlite_url),
        instance=instance,
        run_config={"resources": {"store": {"config": UNIVERSE_FROM_AUDIT_KEY}}},
        raise_on_error=False,
    )
    assert not result.success
    run = instance.get_run_by_id(result.run_id)
    # Dagster's classification: a resource's failure is the run's exception, not a step failure.
    assert run.tags[RUN_FAILURE_REASON_TAG] == "RUN_EXCEPTION"
    assert run.tags[WILL_RETRY_TAG] == "false"
    assert _retried(instance, run.run_id) == []
    assert run.tags[MAX_RETRIES_TAG] == "0"  # set by the store's setup before the run failed

    _alert(instance, run.run_id)
    [payload] = webhook
    assert payload["run_id"] == run.run_id and payload["error"].startswith("ArtifactStore.universe")
    assert SECRET not in str(payload) and "retry_number" not in payload


@asset
def universe_size(store: ArtifactStore) -> int:
    return len(store.tickers())


def universe_size_job():
    """A one-step job on the real ArtifactStore, run by Dagster's multiprocess executor (the compose
    run worker's): the store's setup fails in the step's own process."""
    return Definitions(
        assets=[universe_size],
        resources={"store": ArtifactStore()},
        jobs=[define_asset_job("universe_size_job", [universe_size])],
    ).resolve_job_def("universe_size_job")


def test_under_the_multiprocess_executor_too(instance, webhook, tmp_path, monkeypatch):
    monkeypatch.setenv("LDTM_AUDIT_KEY", SECRET)
    config = {**UNIVERSE_FROM_AUDIT_KEY, "home": str(tmp_path / "home")}
    # The step processes import this module from its folder (not on their path by default).
    job = build_reconstructable_job(__name__, "universe_size_job", reconstructor_working_directory=HERE)
    result = execute_job(
        job, instance=instance, run_config={"resources": {"store": {"config": config}}}, raise_on_error=False
    )
    assert not result.success
    run_id = result.run_id
    run = instance.get_run_by_id(run_id)
    assert run.tags[RUN_FAILURE_REASON_TAG] == "RUN_EXCEPTION"  # DagsterSubprocessError in the orchestrator
    assert run.tags[WILL_RETRY_TAG] == "false" and _retried(instance, run_id) == []
    _alert(instance, run_id)
    [payload] = webhook
    assert payload["run_id"] == run_id and payload["error"].startswith("ArtifactStore.universe")


def _killed(instance, run) -> None:
    """What run monitoring does to a run whose container exited without reporting (docker kill, OOM):
    report_run_failed with no failure reason (dagster/_daemon/monitoring/run_monitoring.py)."""
    instance.report_run_failed(
        run, f"Detected run worker status WorkerStatus.FAILED. Marking run {run.run_id} as failed."
    )


def test_a_killed_run_is_retried_once_and_one_logical_failure_alerts_once(instance, webhook):
    from ldtm_dagster import defs

    job = defs.resolve_job_def("retrain_job")
    first = instance.create_run_for_job(job, tags=dict(job.tags), status=DagsterRunStatus.STARTED)
    _killed(instance, first)
    first = instance.get_run_by_id(first.run_id)
    assert RUN_FAILURE_REASON_TAG not in first.tags and first.tags[WILL_RETRY_TAG] == "true"
    assert _retried(instance, first.run_id) == [first.run_id]  # crashes are still retried
    _alert(instance, first.run_id)
    assert webhook == []  # its retry is pending

    # The retry, tagged as auto_run_reexecution.retry_run makes it, is killed as well.
    kept = {k: v for k, v in first.tags.items() if k not in TAGS_TO_MAYBE_OMIT_ON_RETRY}
    retry = instance.create_run_for_job(
        job,
        tags={
            **kept,
            RETRY_NUMBER_TAG: "1",
            PARENT_RUN_ID_TAG: first.run_id,
            ROOT_RUN_ID_TAG: first.run_id,
        },
        parent_run_id=first.run_id,
        root_run_id=first.run_id,
        status=DagsterRunStatus.STARTED,
    )
    instance.add_run_tags(first.run_id, {AUTO_RETRY_RUN_ID_TAG: retry.run_id})
    _killed(instance, retry)
    assert instance.get_run_by_id(retry.run_id).tags[WILL_RETRY_TAG] == "false"  # max_retries: 1
    assert _retried(instance, retry.run_id) == []
    _alert(instance, retry.run_id)

    [payload] = webhook
    assert payload["run_id"] == retry.run_id and payload["job"] == "retrain_job"
    assert payload["retry_number"] == 1
    assert payload["retry_of"] == payload["root_run_id"] == first.run_id
