"""Issue 38, the dead man's switch: a successful nightly_job run pings LDTM_HEARTBEAT_URL (a local HTTP
server on 127.0.0.1 stands in for healthchecks.io); unset, nothing is sent; unreachable, the sensor logs
a warning without the URL's token and never raises."""

from __future__ import annotations

import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from dagster import DagsterEvent, DagsterEventType, DagsterRunStatus, build_run_status_sensor_context

from ldtm_core import config
from ldtm_dagster import heartbeat
from ldtm_dagster.heartbeat import nightly_heartbeat, ping_url
from ldtm_dagster.partitions import EVENING_TAG

TOKEN = "hb-s3cr3t-token"


@pytest.fixture
def monitor(monkeypatch):
    """A healthchecks.io stand-in: records the path (with query) of every GET; LDTM_HEARTBEAT_URL set to it."""
    received: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            received.append(self.path)
            self.send_response(503 if "/down/" in self.path else 200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"OK")

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    monkeypatch.setenv("LDTM_HEARTBEAT_URL", f"http://127.0.0.1:{server.server_address[1]}/ping/{TOKEN}")
    yield received
    server.shutdown()
    server.server_close()


class Log:
    """Stands in for context.log: keeps every message by level."""

    def __init__(self):
        self.lines: list[tuple[str, str]] = []

    def info(self, message):
        self.lines.append(("info", message))

    def warning(self, message):
        self.lines.append(("warning", message))

    def text(self) -> str:
        return "\n".join(m for _, m in self.lines)


def _run_heartbeat(instance, monkeypatch, tags: dict | None = None) -> Log:
    """Evaluate the sensor for a successful nightly_job run with `tags`; what it logged."""
    from ldtm_dagster import defs

    job = defs.resolve_job_def("nightly_job")
    run = instance.create_run_for_job(job, tags={**job.tags, **(tags or {})}, status=DagsterRunStatus.SUCCESS)
    event = DagsterEvent(DagsterEventType.RUN_SUCCESS.value, job_name=job.name, message="Finished.")
    context = build_run_status_sensor_context(
        sensor_name="nightly_heartbeat", dagster_event=event, dagster_instance=instance, dagster_run=run
    )
    log = Log()
    monkeypatch.setattr(type(context), "log", property(lambda self: log))
    nightly_heartbeat(context)
    return log


def test_a_successful_nightly_run_pings_once_with_its_evening(dagster_instance, monitor, monkeypatch):
    log = _run_heartbeat(dagster_instance, monkeypatch, {"dagster/partition": "2025-03-11"})
    assert monitor == [f"/ping/{TOKEN}?evening=2025-03-11"]
    assert "heartbeat sent" in log.text() and TOKEN not in log.text()


def test_the_evening_tag_stands_in_for_a_missing_partition(dagster_instance, monitor, monkeypatch):
    _run_heartbeat(dagster_instance, monkeypatch, {EVENING_TAG: "2025-03-12"})
    assert monitor == [f"/ping/{TOKEN}?evening=2025-03-12"]


def test_unset_sends_nothing(dagster_instance, monitor, monkeypatch):
    monkeypatch.delenv("LDTM_HEARTBEAT_URL")
    log = _run_heartbeat(dagster_instance, monkeypatch, {"dagster/partition": "2025-03-11"})
    assert monitor == []
    assert "no LDTM_HEARTBEAT_URL" in log.text()


def test_an_unreachable_monitor_is_logged_without_the_token_and_never_raises(dagster_instance, monkeypatch):
    with socket.socket() as s:  # a port nobody listens on once closed
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("LDTM_HEARTBEAT_URL", f"http://127.0.0.1:{port}/ping/{TOKEN}")
    monkeypatch.setattr(heartbeat, "PING_PAUSE_S", 0)
    log = _run_heartbeat(dagster_instance, monkeypatch, {"dagster/partition": "2025-03-11"})
    [(level, message)] = log.lines
    assert level == "warning" and "not delivered" in message and f"127.0.0.1:{port}/***" in message
    assert TOKEN not in message


def test_an_http_error_is_retried_then_logged(dagster_instance, monitor, monkeypatch):
    monkeypatch.setattr(heartbeat, "PING_PAUSE_S", 0)
    url = config.env_text("LDTM_HEARTBEAT_URL").replace("/ping/", "/down/")
    monkeypatch.setenv("LDTM_HEARTBEAT_URL", url)
    log = _run_heartbeat(dagster_instance, monkeypatch, {"dagster/partition": "2025-03-11"})
    assert len(monitor) == heartbeat.PING_ATTEMPTS == 2
    [(level, message)] = log.lines
    assert level == "warning" and "503" in message and TOKEN not in message


def test_the_url_is_a_secret_setting():
    assert "LDTM_HEARTBEAT_URL" in config.SECRET_SETTINGS
    assert config.SETTINGS["LDTM_HEARTBEAT_URL"].default is None


def test_ping_url_keeps_an_existing_query():
    assert ping_url("https://kuma/api/push/t?status=up", "2025-03-11") == (
        "https://kuma/api/push/t?status=up&evening=2025-03-11"
    )
    assert ping_url("https://hc-ping.com/uuid", None) == "https://hc-ping.com/uuid"


def test_the_sensor_is_defined_and_watches_the_nightly_job():
    from ldtm_dagster import defs

    sensor = defs.resolve_sensor_def("nightly_heartbeat")
    assert sensor is nightly_heartbeat
    assert [j.name for j in nightly_heartbeat._monitored_jobs] == ["nightly_job"]  # no public accessor
    assert sensor.default_status.value == "RUNNING"
