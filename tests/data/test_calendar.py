"""XNYS session helpers against real holidays, and behaviour at the end of the calendar."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pytest
from calendar_oracle import next_monday_session, next_session

from ldtm_core.data.calendar import (
    calendar_bounds,
    is_session,
    latest_session_on_or_before,
    session_array,
    sessions_after,
    sessions_between,
    target_dates,
)
from ldtm_core.errors import InputError

D = dt.date


@pytest.mark.parametrize(
    "closed",
    [
        D(2024, 3, 29),  # Good Friday
        D(2023, 4, 7),  # Good Friday
        D(2024, 11, 28),  # Thanksgiving
        D(2022, 6, 20),  # Juneteenth observed (19th was a Sunday)
        D(2023, 6, 19),  # Juneteenth
        D(2021, 7, 5),  # July 4 on a Sunday -> Monday closed
        D(2020, 7, 3),  # July 4 on a Saturday -> Friday closed
        D(2024, 5, 27),  # Memorial Day
        D(2024, 9, 2),  # Labor Day
        D(2024, 6, 15),  # a Saturday
    ],
)
def test_holidays_are_not_sessions(closed):
    assert not is_session(closed)


def test_juneteenth_only_from_2022_and_half_days_are_sessions():
    assert is_session(D(2021, 6, 18))  # Friday before Juneteenth 2021: NYSE had not adopted it yet
    assert is_session(D(2024, 11, 29))  # day after Thanksgiving (early close) trades
    assert is_session(D(2020, 7, 2))


@pytest.mark.parametrize(
    "day, expected",
    [
        (D(2024, 3, 28), D(2024, 4, 1)),  # over Good Friday and the weekend
        (D(2024, 11, 27), D(2024, 11, 29)),  # over Thanksgiving
        (D(2022, 6, 17), D(2022, 6, 21)),  # over Juneteenth observed on Monday
        (D(2021, 7, 2), D(2021, 7, 6)),  # July 4 2021 (Sunday) observed Monday 5th
        (D(2020, 7, 2), D(2020, 7, 6)),  # July 4 2020 (Saturday) observed Friday 3rd
        (D(2024, 6, 15), D(2024, 6, 17)),  # from a Saturday
        (D(2024, 6, 17), D(2024, 6, 18)),  # plain weekday
    ],
)
def test_next_session(day, expected):
    assert next_session(day) == expected


@pytest.mark.parametrize(
    "day, expected",
    [
        (D(2024, 5, 24), D(2024, 5, 28)),  # Friday; Monday 27th is Memorial Day -> Tuesday
        (D(2024, 5, 20), D(2024, 5, 28)),  # a Monday: the *next* Monday (strictly after), a holiday
        (D(2024, 5, 26), D(2024, 5, 28)),  # Sunday: Monday is the next day, but a holiday
        (D(2024, 8, 29), D(2024, 9, 3)),  # Thursday before Labor Day
        (D(2024, 6, 12), D(2024, 6, 17)),  # ordinary week
        (D(2024, 6, 17), D(2024, 6, 24)),  # Monday -> following Monday
    ],
)
def test_next_monday_session(day, expected):
    assert next_monday_session(day) == expected


def test_21_sessions_after_counted_over_good_friday():
    # Counted by hand: March 2024 after the 1st has 19 sessions up to the 28th (29th Good Friday),
    # then 1 April is the 20th and 2 April the 21st.
    assert sessions_after(D(2024, 3, 1), 21) == D(2024, 4, 2)
    assert sessions_after(D(2024, 3, 2), 21) == D(2024, 4, 2)  # a Saturday counts from Friday's session
    assert sessions_after(D(2024, 3, 1), 1) == D(2024, 3, 4)


def test_sessions_between_inclusive_and_latest_on_or_before():
    got = sessions_between("2024-03-27", "2024-04-02")
    assert got == [D(2024, 3, 27), D(2024, 3, 28), D(2024, 4, 1), D(2024, 4, 2)]
    assert latest_session_on_or_before(D(2024, 3, 31)) == D(2024, 3, 28)
    assert latest_session_on_or_before(D(2024, 4, 1)) == D(2024, 4, 1)
    # Older dates extend the calendar (issue 20 item 7) down to its floor.
    assert latest_session_on_or_before(D(1980, 1, 1)) == D(1979, 12, 31)
    with pytest.raises(InputError, match="before the first"):
        latest_session_on_or_before(D(1799, 6, 1))


# (evening, next_day, next_monday, one_month = 21 sessions), every date counted by hand on a calendar.
TARGETS = [
    (D(2024, 3, 1), D(2024, 3, 4), D(2024, 3, 4), D(2024, 4, 2)),  # Friday; Good Friday inside the month
    (D(2024, 3, 28), D(2024, 4, 1), D(2024, 4, 1), D(2024, 4, 29)),  # over Good Friday
    (D(2024, 5, 24), D(2024, 5, 28), D(2024, 5, 28), D(2024, 6, 26)),  # Memorial Day; Juneteenth inside
    (D(2024, 6, 17), D(2024, 6, 18), D(2024, 6, 24), D(2024, 7, 18)),  # Monday; Juneteenth + July 4 inside
    (D(2024, 11, 27), D(2024, 11, 29), D(2024, 12, 2), D(2024, 12, 30)),  # Thanksgiving; Christmas inside
    (D(2023, 12, 29), D(2024, 1, 2), D(2024, 1, 2), D(2024, 1, 31)),  # New Year's Monday closed; MLK inside
]


def test_target_dates_against_hand_counted_dates():
    days = np.array([t[0] for t in TARGETS], dtype="datetime64[D]")
    t = target_dates(days)
    nd, nm, om = t["next_day"], t["next_monday"], t["one_month"]
    got = list(zip(days.astype(object), nd.astype(object), nm.astype(object), om.astype(object), strict=True))
    assert got == TARGETS
    for day, next_day, monday, month in TARGETS:
        assert (next_session(day), next_monday_session(day), sessions_after(day, 21)) == (
            next_day,
            monday,
            month,
        )


def test_end_of_calendar_scalar_helpers_raise_and_vector_returns_nat():
    first, last = calendar_bounds()
    s = session_array()
    # 1990 unless older data was read in this process (the calendar then reaches back to it).
    assert first <= D(1990, 1, 2) and last == s[-1].astype(object)
    assert last > dt.date.today()
    penultimate = s[-2].astype(object)
    with pytest.raises(InputError, match="beyond the XNYS calendar"):
        sessions_after(penultimate, 21)
    assert sessions_after(s[-22].astype(object), 21) == last

    t = target_dates(np.array([s[-1], s[-2], s[-22]]))
    nd, nm, om = t["next_day"], t["next_monday"], t["one_month"]
    assert np.isnat(nd[0]) and np.isnat(nm[0]) and np.isnat(om[0])
    assert nd[1] == s[-1] and np.isnat(om[1])
    assert om[2] == s[-1]
