"""Freshness of `prices` (SPEC §2): which universe tickers lack the latest session's bar.

An evening's snapshots need that session's bar per ticker. `predict` already skips a ticker without it
("no price for X on D") and predicts it on a later rerun; this names the stale tickers up front, with
the reason, for the asset check and the CLI.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass, field

from sqlalchemy import Engine, func, select

from ldtm_core.data.calendar import sessions_between
from ldtm_core.schema import prices


@dataclass
class Freshness:
    session: dt.date | None  # the session every ticker should have: the latest one stored for any
    fresh: list[str] = field(default_factory=list)
    stale: dict[str, str] = field(default_factory=dict)  # ticker -> reason

    @property
    def ok(self) -> bool:
        return not self.stale


def freshness(engine: Engine, tickers: Sequence[str], session: dt.date | None = None) -> Freshness:
    """Tickers with and without a bar on `session` (default: the latest date stored for any of them)."""
    tickers = list(dict.fromkeys(tickers))
    stmt = select(prices.c.ticker, func.max(prices.c.date)).where(prices.c.ticker.in_(tickers))
    with engine.connect() as conn:
        rows = conn.execute(stmt.group_by(prices.c.ticker)).all()
    # SQLite may hand MAX(date) back as text.
    last = {t: d if isinstance(d, dt.date) else dt.date.fromisoformat(str(d)[:10]) for t, d in rows}
    if session is None:
        session = max(last.values(), default=None)
    report = Freshness(session)
    for t in tickers:
        day = last.get(t)
        if day is None:
            report.stale[t] = "no prices stored"
        elif session is not None and day < session:
            behind = len(sessions_between(day, session)) - 1
            report.stale[t] = f"last bar {day}, {behind} session(s) before {session}"
        else:
            report.fresh.append(t)
    return report
