"""Notifications: always logged; POSTed as JSON to LDTM_NOTIFY_WEBHOOK_URL when it is set.

A webhook that is down, slow or refuses the post never breaks the caller: the failure is logged and
reported in the result. The URL may hold a token, so only its scheme and host are ever logged.
"""

from __future__ import annotations

import json
import logging
import urllib.error
import urllib.request
from dataclasses import dataclass

from ldtm_core.config import url_origin

log = logging.getLogger("ldtm.notify")


@dataclass
class NotifyResult:
    logged: bool
    posted: bool
    status: int | None = None
    error: str | None = None


def send(
    payload: dict, webhook_url: str | None = None, timeout: float = 3.0, text: str | None = None
) -> NotifyResult:
    """Log `text` (or the payload) at WARNING and POST the payload as JSON when a webhook is configured."""
    log.warning("%s", text or json.dumps(payload, sort_keys=True, default=str))
    if not webhook_url:
        return NotifyResult(logged=True, posted=False)
    body = json.dumps(payload, sort_keys=True, default=str).encode()
    try:
        req = urllib.request.Request(
            webhook_url,
            data=body,
            method="POST",
            headers={"Content-Type": "application/json", "User-Agent": "ldtm"},
        )
        with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310 - operator-configured URL
            return NotifyResult(logged=True, posted=True, status=resp.status)
    except Exception as exc:  # noqa: BLE001 - a broken webhook must never break the gate
        # ValueError text echoes the URL (which may hold a token): name the problem, not the URL.
        reason = (
            "invalid webhook URL"
            if isinstance(exc, ValueError)
            else getattr(exc, "reason", None) or type(exc).__name__
        )
        log.warning("notification webhook %s failed: %s", url_origin(webhook_url), reason)
        return NotifyResult(logged=True, posted=False, status=getattr(exc, "code", None), error=str(reason))
