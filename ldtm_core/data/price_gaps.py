"""Holes in a ticker's prices: exchange sessions with no bar between two stored bars.

A hole longer than `LDTM_MAX_GAP_SESSIONS` (default 5, a trading week) splits the series into segments:
features restart after it (`features.compute_features`, each segment with its own warm-up), no sample
window crosses it (`samples.build_samples`), and every ingest path warns of a hole next to what it just
stored (`gaps_since`), naming the ticker, the bars either side and the sessions missing. Without the
rule the first bar after a six-year hole got a 1-day log return against a close six years earlier.

Shorter holes (a missing bar or two from a source) are bridged as before.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd
from sqlalchemy import Engine, func, select

from ldtm_core.config import setting_int
from ldtm_core.data.calendar import cover, session_array
from ldtm_core.schema import prices

ENV_MAX_GAP = "LDTM_MAX_GAP_SESSIONS"
DEFAULT_MAX_GAP_SESSIONS = 5
log = logging.getLogger("ldtm.ingest")


@dataclass(frozen=True)
class PriceGap:
    ticker: str
    before: dt.date  # the last bar before the hole
    after: dt.date  # the first bar after it
    sessions: int  # exchange sessions with no bar in between

    def describe(self) -> str:
        return (
            f"{self.ticker}: price gap of {self.sessions} sessions with no bar between {self.before} and "
            f"{self.after}; features restart after it (longer than {ENV_MAX_GAP}={max_gap_sessions()})"
        )


def max_gap_sessions() -> int:
    """The longest hole (in missing sessions) features may span: LDTM_MAX_GAP_SESSIONS, checked."""
    return setting_int(ENV_MAX_GAP)


def _days(dates) -> np.ndarray:
    if isinstance(dates, np.ndarray) and dates.dtype == np.dtype("datetime64[D]"):
        return dates  # inference's price arrays: a pandas round trip per ticker cost ~0.5 ms each
    return pd.to_datetime(pd.Series(dates)).to_numpy().astype("datetime64[D]")


def missing_sessions(dates) -> np.ndarray:
    """Per consecutive pair of sorted bar dates, the sessions strictly between them (len(dates) - 1)."""
    days = _days(dates)
    if len(days) < 2:
        return np.zeros(0, dtype=np.int64)
    cover(pd.Timestamp(days[0]).date())
    pos = np.searchsorted(session_array(), days)
    # Off-calendar dates (test frames on business days) land on the next session: never negative.
    return np.maximum(np.diff(pos) - 1, 0)


def segment_ids(dates, max_gap: int | None = None) -> np.ndarray:
    """Per bar, the index of its segment: it grows by one after every hole longer than `max_gap`."""
    limit = max_gap_sessions() if max_gap is None else max_gap
    breaks = missing_sessions(dates) > limit
    return (
        np.concatenate([[0], np.cumsum(breaks)]).astype(np.int64)
        if len(breaks)
        else np.zeros(len(_days(dates)), dtype=np.int64)
    )


def find_gaps(ticker: str, dates, max_gap: int | None = None) -> list[PriceGap]:
    """The holes longer than `max_gap` sessions in one ticker's sorted bar dates."""
    limit = max_gap_sessions() if max_gap is None else max_gap
    days = _days(dates)
    missing = missing_sessions(days)
    return [
        PriceGap(ticker, pd.Timestamp(days[i]).date(), pd.Timestamp(days[i + 1]).date(), int(missing[i]))
        for i in np.flatnonzero(missing > limit)
    ]


def gaps_since(
    engine: Engine, spans: Mapping[str, tuple[dt.date, dt.date]], max_gap: int | None = None
) -> list[PriceGap]:
    """The holes next to or inside what was just stored: per ticker, those of its stored series that
    end on or after the first new date and start on or before the last (`spans`: {ticker: (first, last)}).
    Each is logged as a warning; a hole elsewhere in the history is not repeated on every ingest."""
    spans = {t: (pd.Timestamp(a).date(), pd.Timestamp(b).date()) for t, (a, b) in spans.items() if a and b}
    if not spans:
        return []
    tickers = sorted(spans)
    lo, hi = min(a for a, _ in spans.values()), max(b for _, b in spans.values())
    by_ticker: dict[str, list] = {t: [] for t in tickers}
    with engine.connect() as conn:
        edges = [
            select(prices.c.ticker, func.max(prices.c.date)).where(prices.c.date < lo),
            select(prices.c.ticker, func.min(prices.c.date)).where(prices.c.date > hi),
        ]
        for stmt in edges:
            for t, d in conn.execute(stmt.where(prices.c.ticker.in_(tickers)).group_by(prices.c.ticker)):
                by_ticker[t].append(d)
        inside = select(prices.c.ticker, prices.c.date).where(
            prices.c.ticker.in_(tickers), prices.c.date >= lo, prices.c.date <= hi
        )
        for t, d in conn.execute(inside):
            by_ticker[t].append(d)
    out = []
    for t in tickers:
        first, last = spans[t]
        dates = sorted(pd.Timestamp(d).date() for d in by_ticker[t])
        out += [g for g in find_gaps(t, dates, max_gap) if g.after >= first and g.before <= last]
    for gap in out:
        log.warning("%s", gap.describe())
    return out
