"""Scalar target dates for tests, computed from the session list alone: an oracle independent of the
vectorised `calendar.target_dates` the product uses."""

from __future__ import annotations

import datetime as dt

from ldtm_core.data.calendar import sessions_between


def _date(day) -> dt.date:
    return dt.date.fromisoformat(day) if isinstance(day, str) else day


def next_session(day) -> dt.date:
    """The first session strictly after `day`."""
    day = _date(day)
    return next(
        s for s in sessions_between(day + dt.timedelta(days=1), day + dt.timedelta(days=15)) if s > day
    )


def next_monday_session(day) -> dt.date:
    """The first session on or after the first Monday strictly after `day`."""
    day = _date(day)
    monday = day + dt.timedelta(days=7 - day.weekday())
    return next(s for s in sessions_between(monday, monday + dt.timedelta(days=15)) if s >= monday)
