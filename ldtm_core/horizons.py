"""The forecast horizons: the one definition every part iterates (targets, model heads, fold storage,
fill-back, re-fill and audit joins, views, board, CLI, dashboard, reports, paired tests).

A horizon's `name` is the prefix of its snapshot columns (`{name}_pred`, `_date`, `_actual`,
`_pct_error`, `_filled_at`); the order of HORIZONS is the order of the model's heads, of the columns of
every `[n, len(HORIZONS)]` array (targets, stored fold predictions) and of every table. Adding a
horizon is one entry here plus a migration for its columns and views (docs/architecture.md).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# SPEC §4: "one month" is 21 trading sessions after the run date.
ONE_MONTH_SESSIONS = 21


@dataclass(frozen=True)
class Horizon:
    name: str  # column prefix and the model config's head name: "next_day"
    label: str  # for people: "next day"
    short: str  # paired tests, gate reports and board headers: "1d"
    alias: str  # SQL alias in the accuracy views, key suffix in the shadow's pairs: "nd"
    abbr: str  # column headers of the board (CLI, dashboard): "1d"
    # The target rule: the session `sessions` sessions after the run date's session, or with
    # `weekday` set, the first session on or after the first such weekday (0 = Monday) after the run date.
    sessions: int | None = None
    weekday: int | None = None
    # How many consecutive rows share (part of) a target's path: the lag a test valid under overlapping
    # targets must allow for (1: no overlap).
    overlap: int = 1

    def __post_init__(self):
        if (self.sessions is None) == (self.weekday is None):
            raise ValueError(f"horizon {self.name!r}: give exactly one of sessions or weekday")

    @property
    def title(self) -> str:
        return self.label[:1].upper() + self.label[1:]

    def col(self, what: str) -> str:
        """The snapshot column `{name}_{what}` (pred, date, actual, pct_error, filled_at)."""
        return f"{self.name}_{what}"


NEXT_DAY = Horizon("next_day", "next day", short="1d", alias="nd", abbr="1d", sessions=1, overlap=1)
NEXT_MONDAY = Horizon(
    "next_monday", "next Monday", short="monday", alias="nm", abbr="Mon", weekday=0, overlap=5
)
ONE_MONTH = Horizon(
    "one_month",
    "one month",
    short="month",
    alias="om",
    abbr="1m",
    sessions=ONE_MONTH_SESSIONS,
    overlap=ONE_MONTH_SESSIONS,
)

HORIZONS: tuple[Horizon, ...] = (NEXT_DAY, NEXT_MONDAY, ONE_MONTH)
NAMES: tuple[str, ...] = tuple(h.name for h in HORIZONS)
SHORT_NAMES: tuple[str, ...] = tuple(h.short for h in HORIZONS)
BY_NAME: dict[str, Horizon] = {h.name: h for h in HORIZONS}
BY_SHORT: dict[str, Horizon] = {h.short: h for h in HORIZONS}
# The horizon whose direction is scored (direction_pred, hits, ties, the gate): the first.
DIRECTION = NEXT_DAY
# The horizons scored by |pct error| only, each in its own 30-day window (the board's `{name}_mape`
# and `{name}_n`); the direction horizon's error is over the board's own window.
ERROR_ONLY: tuple[Horizon, ...] = tuple(h for h in HORIZONS if h != DIRECTION)


def target_index(sessions: np.ndarray, days: np.ndarray, h: Horizon, month_sessions: int) -> np.ndarray:
    """Index into the sorted session array `sessions` of `h`'s target for each datetime64[D] day (may be
    past the end). `month_sessions` replaces ONE_MONTH_SESSIONS for the month horizon (tests, profiles)."""
    if h.weekday is not None:
        # numpy weekday: 1970-01-01 was a Thursday, so (days + 3) % 7 gives Monday=0.
        weekday = (days.astype("int64") + 3 - h.weekday) % 7
        first_after = days + (7 - weekday).astype("timedelta64[D]")
        return np.searchsorted(sessions, first_after, "left")
    n = month_sessions if h is ONE_MONTH else h.sessions
    return np.searchsorted(sessions, days, "right") - 1 + n
