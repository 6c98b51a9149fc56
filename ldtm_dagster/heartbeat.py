"""A dead man's switch for the nightly: each successful `nightly_job` run pings
LDTM_HEARTBEAT_URL with one HTTP GET, and an outside monitor (healthchecks.io, Uptime Kuma...) alerts
when the pings stop. The in-product alerts (alert_sensors.py) run in the daemon: with the daemon or the
host down they are silent, and only a monitor elsewhere notices the missing evening.

The evening the run covered is appended as `?evening=YYYY-MM-DD` (`&` where the URL already has a query):
healthchecks.io and Uptime Kuma take any GET to the URL as a ping. The URL carries the monitor's token,
so it is a secret setting: a failed ping is logged with the URL masked, and never fails anything."""

from __future__ import annotations

import time
import urllib.parse
import urllib.request

from dagster import DagsterRunStatus, DefaultSensorStatus, RunStatusSensorContext, run_status_sensor

from ldtm_core.config import redact_secrets, setting, url_origin

from .jobs import nightly_job
from .partitions import EVENING_TAG

HEARTBEAT_ENV = "LDTM_HEARTBEAT_URL"
PING_ATTEMPTS = 2
PING_TIMEOUT_S = 10.0
PING_PAUSE_S = 5.0  # between attempts


def ping_url(url: str, evening: str | None) -> str:
    """`url` with the evening as a query parameter (none where the run names no evening)."""
    if not evening:
        return url
    return f"{url}{'&' if '?' in url else '?'}{urllib.parse.urlencode({'evening': evening})}"


def ping(url: str, attempts: int = PING_ATTEMPTS, timeout: float = PING_TIMEOUT_S) -> str | None:
    """GET `url` up to `attempts` times until a 2xx/3xx answer: None when delivered, else the last error
    (secrets masked). Never raises."""
    error = "no attempt"
    for attempt in range(attempts):
        if attempt:
            time.sleep(PING_PAUSE_S)
        try:
            request = urllib.request.Request(url, method="GET", headers={"User-Agent": "ldtm-heartbeat"})
            with urllib.request.urlopen(request, timeout=timeout) as response:
                response.read(1024)
                return None
        except Exception as exc:  # urllib's URLError/HTTPError, timeouts, a malformed URL: all just logged
            error = f"{type(exc).__name__}: {exc}"
    return redact_secrets(error).replace(url, "***")


def _evening(context: RunStatusSensorContext) -> str | None:
    """The evening the nightly run covered: its partition key, else the evening tag."""
    tags = context.dagster_run.tags
    return tags.get("dagster/partition") or tags.get(EVENING_TAG)


@run_status_sensor(
    name="nightly_heartbeat",
    run_status=DagsterRunStatus.SUCCESS,
    monitored_jobs=[nightly_job],
    default_status=DefaultSensorStatus.RUNNING,
    minimum_interval_seconds=30,
    description="Pings LDTM_HEARTBEAT_URL (HTTP GET) after each successful nightly_job run: an outside "
    "monitor alerts when the pings stop (daemon or host down).",
)
def nightly_heartbeat(context: RunStatusSensorContext) -> None:
    url = setting(HEARTBEAT_ENV)
    run = context.dagster_run
    if not url:
        context.log.info(f"nightly run {run.run_id} succeeded; no {HEARTBEAT_ENV} set: no heartbeat")
        return
    evening = _evening(context)
    error = ping(ping_url(url, evening))
    where = url_origin(url)
    if error is None:
        context.log.info(f"heartbeat sent to {where} for evening {evening or '(none)'} (run {run.run_id})")
    else:
        context.log.warning(
            redact_secrets(
                f"heartbeat to {where} for evening {evening or '(none)'} (run {run.run_id}) not delivered "
                f"after {PING_ATTEMPTS} attempts: {error}"
            )
        )
