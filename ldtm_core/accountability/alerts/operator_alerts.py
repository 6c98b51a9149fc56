"""Operator alerts through the notification webhook (LDTM_NOTIFY_WEBHOOK_URL, as gate failures):
a failed run, and an evening whose snapshots are still missing at the deadline.

Payloads carry what an operator needs to act (job, partition, run id, the first line of the error)
and never a secret: any `scheme://user:password@` credential, the database password and the
webhook URL itself are masked out of the error text before it leaves the process.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass

from sqlalchemy import Engine, func, select

from ldtm_core.accountability.alerts import notify
from ldtm_core.config import mask_secrets, redact_secrets, setting_time
from ldtm_core.data.calendar import MARKET_TZ, has_closed, is_session, latest_session_on_or_before
from ldtm_core.schema import snapshots

ENV_DEADLINE = "LDTM_SNAPSHOT_DEADLINE"  # its default: the row in config.SETTINGS (its one home)
_EXCEPTION_PREFIX = re.compile(r"^(?:[A-Za-z_][\w]*\.)+[A-Z]\w*: ")
_CREDENTIALS = re.compile(r"(\b[a-z][a-z0-9+.\-]*://[^/\s:@]*:)[^@\s/]*@", re.I)


def scrub(text: str, *, database_url: str | None = None, webhook_url: str | None = None) -> str:
    """`text` with URL credentials, the database password, the webhook URL and every other secret
    (config.redact_secrets) removed."""
    text = redact_secrets(_CREDENTIALS.sub(r"\1***@", text))
    if database_url:
        text = mask_secrets(text, database_url)
    if webhook_url:
        text = text.replace(webhook_url, "<webhook>")
    return text


def first_line(text: str | None) -> str:
    """The first non-empty line, without a leading `package.module.ExceptionClass: `."""
    lines = [line.strip() for line in (text or "").strip().splitlines() if line.strip()]
    return _EXCEPTION_PREFIX.sub("", lines[0])[:500] if lines else ""


def run_failure_payload(
    *,
    job: str,
    partition: str | None,
    run_id: str,
    error: str | None,
    database_url: str | None = None,
    webhook_url: str | None = None,
    failed_tickers: dict[str, str] | None = None,
) -> dict:
    """The alert for a failed run; `failed_tickers` ({ticker: error}) where a fanned-out step failed
    for some tickers only (the others were materialised)."""
    payload = {
        "event": "run_failure",
        "job": job,
        "partition": partition,
        "run_id": run_id,
        "error": scrub(first_line(error), database_url=database_url, webhook_url=webhook_url),
    }
    if failed_tickers:
        payload["failed_tickers"] = {
            t: scrub(first_line(why), database_url=database_url, webhook_url=webhook_url)
            for t, why in failed_tickers.items()
        }
    return payload


def notify_run_failure(payload: dict, webhook_url: str | None) -> notify.NotifyResult:
    where = f" partition {payload['partition']}" if payload.get("partition") else ""
    text = f"run failed: {payload['job']}{where} (run {payload['run_id']}): {payload['error']}"
    return notify.send(payload, webhook_url, text=text)


def deadline_from_env() -> dt.time:
    return setting_time(ENV_DEADLINE)  # the settings row's default when unset or empty


def due_session(now: dt.datetime, deadline: dt.time) -> dt.date:
    """The latest session whose snapshot deadline (New York time) has passed at `now`; a deadline set
    before the close (early-close days included) waits for the close."""
    local = now.astimezone(MARKET_TZ)
    today = local.date()
    if is_session(today) and local.time() >= deadline and has_closed(today, now):
        return today
    return latest_session_on_or_before(today - dt.timedelta(days=1))


@dataclass(frozen=True)
class Freshness:
    session: dt.date
    deadline: dt.datetime
    rows: int

    @property
    def stale(self) -> bool:
        return self.rows == 0

    def payload(self) -> dict:
        return {
            "event": "snapshots_missing",
            "session": str(self.session),
            "deadline": self.deadline.isoformat(),
            "snapshot_rows": self.rows,
            "message": f"no snapshot for session {self.session} by {self.deadline:%H:%M %Z}",
        }


def snapshot_freshness(engine: Engine, now: dt.datetime, deadline: dt.time | None = None) -> Freshness:
    """How many snapshot rows exist for the latest session whose deadline has passed."""
    deadline = deadline or deadline_from_env()
    session = due_session(now, deadline)
    with engine.connect() as conn:
        rows = conn.execute(select(func.count()).where(snapshots.c.run_date == session)).scalar() or 0
    return Freshness(session, dt.datetime.combine(session, deadline, tzinfo=MARKET_TZ), int(rows))


def notify_stale_snapshots(freshness: Freshness, webhook_url: str | None) -> notify.NotifyResult:
    return notify.send(freshness.payload(), webhook_url, text=freshness.payload()["message"])
