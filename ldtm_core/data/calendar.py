"""XNYS trading sessions and the three target dates of SPEC §4, from a real exchange calendar.

Scalar helpers raise a clear error past the calendar's end; the vectorised `target_dates`
returns NaT there, because the newest samples legitimately have no target yet.
"""

from __future__ import annotations

import datetime as dt
from functools import lru_cache

import exchange_calendars as xcals
import numpy as np
import pandas as pd

from ldtm_core.errors import InputError

CALENDAR_NAME = "XNYS"
# exchange_calendars covers only 20 years back by default; real histories start in the 1990s.
CALENDAR_START = "1990-01-02"
ONE_MONTH_SESSIONS = 21
NAT = np.datetime64("NaT", "D")


@lru_cache(maxsize=1)
def _calendar() -> xcals.ExchangeCalendar:
    end = (pd.Timestamp.today().normalize() + pd.DateOffset(years=2)).strftime("%Y-%m-%d")
    return xcals.get_calendar(CALENDAR_NAME, start=CALENDAR_START, end=end)


@lru_cache(maxsize=1)
def session_array() -> np.ndarray:
    """Every XNYS session the calendar knows, as sorted datetime64[D]."""
    return _calendar().sessions.values.astype("datetime64[D]")


def calendar_bounds() -> tuple[dt.date, dt.date]:
    s = session_array()
    return _to_date(s[0]), _to_date(s[-1])


def _to_d64(value) -> np.datetime64:
    return np.datetime64(pd.Timestamp(value).date(), "D")


def _to_date(value: np.datetime64) -> dt.date:
    return pd.Timestamp(value).date()


def sessions_between(start, end) -> list[dt.date]:
    """Sessions in [start, end], inclusive."""
    s = session_array()
    lo, hi = np.searchsorted(s, _to_d64(start), "left"), np.searchsorted(s, _to_d64(end), "right")
    return [_to_date(x) for x in s[lo:hi]]


def is_session(day) -> bool:
    s = session_array()
    d = _to_d64(day)
    i = np.searchsorted(s, d)
    return bool(i < len(s) and s[i] == d)


def latest_session_on_or_before(day) -> dt.date:
    s = session_array()
    i = np.searchsorted(s, _to_d64(day), "right") - 1
    if i < 0:
        raise InputError(f"{day} is before the first {CALENDAR_NAME} session ({_to_date(s[0])})")
    return _to_date(s[i])


def range_problem(day) -> str | None:
    """Why `day` is outside the calendar's range (None when inside it): the calendar knows sessions only
    from CALENDAR_START to two years ahead, so a date past that is unknown, not a closed day."""
    first, last = calendar_bounds()
    d = pd.Timestamp(day).date()
    if d < first:
        return f"{d} is before the {CALENDAR_NAME} calendar's range, which starts at {first}"
    if d > last:
        return f"{d} is beyond the {CALENDAR_NAME} calendar's range, which ends at {last}"
    return None


def require_in_range(day, what: str) -> None:
    """Raise InputError naming `what` when `day` lies outside the calendar's range."""
    problem = range_problem(day)
    if problem is not None:
        raise InputError(f"{what}: {problem}")


@lru_cache(maxsize=1)
def _holiday_names() -> dict[dt.date, str]:
    first, last = calendar_bounds()
    names = _calendar().regular_holidays.holidays(pd.Timestamp(first), pd.Timestamp(last), return_name=True)
    return {ts.date(): str(name) for ts, name in names.items()}


def closed_reason(day) -> str:
    """Why `day` is not a session: a weekend, a named holiday, another closure, or outside the range."""
    problem = range_problem(day)
    if problem is not None:
        return problem
    d = pd.Timestamp(day).date()
    if d.weekday() >= 5:
        return f"{d} is a {d.strftime('%A')}, not an {CALENDAR_NAME} session"
    name = _holiday_names().get(d)
    if name:
        return f"{d} is an {CALENDAR_NAME} holiday ({name})"
    return f"{d} is not an {CALENDAR_NAME} session (the exchange was closed)"


def _scalar(result: np.datetime64, what: str, day) -> dt.date:
    if np.isnat(result):
        last = _to_date(session_array()[-1])
        raise InputError(f"{what} of {day} is beyond the {CALENDAR_NAME} calendar, which ends at {last}")
    return _to_date(result)


def next_session(day) -> dt.date:
    """The first session strictly after `day`."""
    return _scalar(target_dates(np.array([_to_d64(day)]))[0][0], "the next session", day)


def next_monday_session(day) -> dt.date:
    """The first session on or after the first Monday strictly after `day` (Tuesday if Monday is a holiday)."""
    return _scalar(target_dates(np.array([_to_d64(day)]))[1][0], "the next-Monday session", day)


def sessions_after(day, n: int = ONE_MONTH_SESSIONS) -> dt.date:
    """The session `n` sessions after `day` (counted from the session on or before `day`)."""
    s = session_array()
    i = np.searchsorted(s, _to_d64(day), "right") - 1 + n
    return _scalar(s[i] if 0 <= i < len(s) else NAT, f"the session {n} sessions after", day)


def target_dates(days: np.ndarray, month_sessions: int = ONE_MONTH_SESSIONS):
    """Vectorised (next_day, next_monday, one_month) target dates for datetime64[D] `days`; NaT past the end."""
    s = session_array()
    days = np.asarray(days, dtype="datetime64[D]")
    n = len(s)

    def take(idx: np.ndarray) -> np.ndarray:
        out = np.full(idx.shape, NAT)
        ok = idx < n
        out[ok] = s[idx[ok]]
        return out

    next_day = take(np.searchsorted(s, days, "right"))
    # numpy weekday: 1970-01-01 was a Thursday, so (days + 3) % 7 gives Monday=0.
    weekday = (days.astype("int64") + 3) % 7
    first_monday_after = days + (7 - weekday).astype("timedelta64[D]")
    next_monday = take(np.searchsorted(s, first_monday_after, "left"))
    one_month = take(np.searchsorted(s, days, "right") - 1 + month_sessions)
    return next_day, next_monday, one_month
