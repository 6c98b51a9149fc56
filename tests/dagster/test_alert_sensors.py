"""Alerting through the webhook, against a local HTTP server on 127.0.0.1: a failed run, and no
snapshots for the latest session by the deadline."""

import datetime as dt
import json

from dagster import build_run_status_sensor_context, build_sensor_context, materialize
from ldtm_dagster_helpers import tiny_resources

from ldtm_core.accountability.alerts import operator_alerts
from ldtm_dagster.alert_sensors import run_failure_alert, snapshots_freshness_alert
from ldtm_dagster.assets import prices

NY = operator_alerts.MARKET_TZ


def test_a_failed_run_posts_job_partition_run_id_and_first_error_line(
    webhook, dagster_instance, sqlite_url, tmp_path, monkeypatch
):
    # The database password must never leave: the error below quotes a URL with one.
    monkeypatch.setenv("LDTM_DATABASE_URL", "postgresql://ldtm:hunter2@db:5432/ldtm")
    monkeypatch.setenv("LDTM_PRICE_SOURCE", "files:postgresql://ldtm:hunter2@db/nowhere")
    result = materialize(
        [prices],
        resources=tiny_resources(tmp_path, sqlite_url),
        instance=dagster_instance,
        raise_on_error=False,
        tags={"dagster/partition": "2025-01-02"},
    )
    assert not result.success
    context = build_run_status_sensor_context(
        sensor_name="run_failure_alert",
        dagster_instance=dagster_instance,
        dagster_run=result.dagster_run,
        dagster_event=result.get_run_failure_event(),
    ).for_run_failure()
    run_failure_alert(context)

    [payload] = webhook
    assert payload["event"] == "run_failure" and payload["run_id"] == result.run_id
    assert payload["job"] == result.dagster_run.job_name and payload["partition"] == "2025-01-02"
    assert payload["error"].startswith("prices: files source:") and "is not a directory" in payload["error"]
    assert "\n" not in payload["error"]
    text = json.dumps(payload)
    assert "hunter2" not in text and "s3cr3t" not in text


def test_scrub_removes_credentials_database_password_and_webhook():
    text = "connect postgresql://u:pw1@h/db failed; token in http://x/hook/abc; pw2 echoed"
    out = operator_alerts.scrub(text, database_url="postgresql://u:pw2@h/db", webhook_url="http://x/hook/abc")
    assert "pw1" not in out and "pw2" not in out and "abc" not in out


def test_due_session_follows_the_deadline_in_new_york():
    deadline = dt.time(21, 0)
    friday = dt.datetime(2025, 1, 3, 20, 59, tzinfo=NY)
    assert operator_alerts.due_session(friday, deadline) == dt.date(
        2025, 1, 2
    )  # before the deadline: Thursday
    assert operator_alerts.due_session(friday.replace(hour=21, minute=0), deadline) == dt.date(2025, 1, 3)
    assert operator_alerts.due_session(dt.datetime(2025, 1, 5, 12, tzinfo=NY), deadline) == dt.date(
        2025, 1, 3
    )  # Sunday
    assert operator_alerts.due_session(dt.datetime(2025, 1, 2, 2, 0, tzinfo=dt.UTC), deadline) == dt.date(
        2024, 12, 31
    )


def test_missing_snapshots_alert_once_per_session(webhook, dagster_instance, sqlite_url, tmp_path):
    resources = tiny_resources(tmp_path, sqlite_url)
    context = build_sensor_context(instance=dagster_instance, resources=resources)
    skip = snapshots_freshness_alert(context)
    due = operator_alerts.due_session(dt.datetime.now(dt.UTC), operator_alerts.deadline_from_env())
    [payload] = webhook
    assert payload["event"] == "snapshots_missing" and payload["session"] == str(due)
    assert payload["snapshot_rows"] == 0 and payload["deadline"].startswith(f"{due}T21:00:00")
    assert "alert posted" in skip.skip_message

    again = build_sensor_context(instance=dagster_instance, resources=resources, cursor=context.cursor)
    assert "already alerted" in snapshots_freshness_alert(again).skip_message
    assert len(webhook) == 1
