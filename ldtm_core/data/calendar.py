"""XNYS trading sessions and the three target dates of SPEC §4, from a real exchange calendar.

Scalar helpers raise a clear error past the calendar's end; the vectorised `target_dates`
returns NaT there, because the newest samples legitimately have no target yet.

The clock: every default date ("today", the latest session, live mode, deadlines) is read from
`now()` in the exchange's own time zone, never from the server's date; "the latest session" is the
latest one whose close (16:00 New York, or the early close) has passed. `now()` is the one seam
tests freeze.

The range: the calendar starts at CALENDAR_START and is rebuilt from an earlier date whenever older
data is offered or read (`cover`), so a real full history is never refused for the calendar's limits.
"""

from __future__ import annotations

import datetime as dt
from functools import lru_cache
from zoneinfo import ZoneInfo

import exchange_calendars as xcals
import numpy as np
import pandas as pd

from ldtm_core.errors import InputError
from ldtm_core.horizons import HORIZONS, ONE_MONTH_SESSIONS, target_index

CALENDAR_NAME = "XNYS"
MARKET_TZ = ZoneInfo("America/New_York")
# exchange_calendars covers only 20 years back by default; this is where the calendar starts until
# older data is offered or read (`cover`), e.g. a full MSFT history from 1986.
CALENDAR_START = "1990-01-02"
SESSIONS_PER_YEAR = 252  # the convention annual figures use (returns, Sharpe, false alarms a year)
NAT = np.datetime64("NaT", "D")
_start = dt.date.fromisoformat(CALENDAR_START)


def now() -> dt.datetime:
    """The current instant (UTC-aware): the one clock behind every default date. Tests freeze it."""
    return dt.datetime.now(dt.UTC)


def market_today(at: dt.datetime | None = None) -> dt.date:
    """The date in New York at `at` (default `now()`): 19:53 New York on the 24th is still the 24th."""
    return (at or now()).astimezone(MARKET_TZ).date()


@lru_cache(maxsize=1)
def _calendar() -> xcals.ExchangeCalendar:
    end = (pd.Timestamp(market_today()) + pd.DateOffset(years=2)).strftime("%Y-%m-%d")
    return xcals.get_calendar(CALENDAR_NAME, start=_start.isoformat(), end=end)


def cover(day) -> None:
    """Make the calendar reach back to `day` (the earliest date stored or offered): rebuilt from the
    January before it when it starts later. Cheap when it already does."""
    global _start
    if type(day) is dt.date and day >= _start:  # the common case, without pandas
        return
    if day is None or pd.isna(day):
        return
    d = pd.Timestamp(day).date()
    if d >= _start:
        return
    # From 1 January, a year early: the overlap of an incremental fetch looks a few sessions back.
    _start = dt.date(max(d.year - 1, 1800), 1, 1)
    for cached in (_calendar, session_array, _holiday_names):
        cached.cache_clear()


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
    cover(start)
    s = session_array()
    lo, hi = np.searchsorted(s, _to_d64(start), "left"), np.searchsorted(s, _to_d64(end), "right")
    return s[lo:hi].astype(object).tolist()  # datetime64[D] -> dt.date, vectorised


def is_session(day) -> bool:
    cover(day)
    s = session_array()
    d = _to_d64(day)
    i = np.searchsorted(s, d)
    return bool(i < len(s) and s[i] == d)


def latest_session_on_or_before(day) -> dt.date:
    cover(day)
    s = session_array()
    i = np.searchsorted(s, _to_d64(day), "right") - 1
    if i < 0:
        raise InputError(f"{day} is before the first {CALENDAR_NAME} session ({_to_date(s[0])})")
    return _to_date(s[i])


def session_close(day) -> dt.datetime:
    """When session `day` closes (UTC-aware): 16:00 New York, earlier on an early-close day."""
    return _calendar().session_close(pd.Timestamp(day).date()).to_pydatetime()


def session_open(day) -> dt.datetime:
    """When session `day` opens (UTC-aware): 09:30 New York."""
    return _calendar().session_open(pd.Timestamp(day).date()).to_pydatetime()


def latest_closed_session(at: dt.datetime | None = None) -> dt.date:
    """The latest session whose close has passed at `at` (default `now()`): at 10:00 New York on a
    session day that session is still trading, so it is the one before."""
    at = at or now()
    day = latest_session_on_or_before(market_today(at))
    if session_close(day) > at:
        day = latest_session_on_or_before(day - dt.timedelta(days=1))
    return day


def has_closed(day, at: dt.datetime | None = None) -> bool:
    """Whether session `day`'s close has passed at `at` (default `now()`)."""
    return session_close(day) <= (at or now())


def range_problem(day) -> str | None:
    """Why `day` is outside the calendar's range (None when inside it): the calendar knows sessions up
    to two years ahead, so a date past that is unknown, not a closed day. Earlier dates extend it."""
    cover(day)
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


def sessions_after(day, n: int = ONE_MONTH_SESSIONS) -> dt.date:
    """The session `n` sessions after `day` (counted from the session on or before `day`)."""
    s = session_array()
    i = np.searchsorted(s, _to_d64(day), "right") - 1 + n
    return _scalar(s[i] if 0 <= i < len(s) else NAT, f"the session {n} sessions after", day)


def target_dates(days: np.ndarray, month_sessions: int = ONE_MONTH_SESSIONS) -> dict[str, np.ndarray]:
    """Vectorised target dates for datetime64[D] `days`, one array per horizon (keyed by name, in
    HORIZONS order); NaT past the end."""
    days = np.asarray(days, dtype="datetime64[D]")
    if days.size:
        cover(days.min())
    s = session_array()
    n = len(s)

    def take(idx: np.ndarray) -> np.ndarray:
        out = np.full(idx.shape, NAT)
        ok = idx < n
        out[ok] = s[idx[ok]]
        return out

    return {h.name: take(target_index(s, days, h, month_sessions)) for h in HORIZONS}
