"""One-day moves too large to be ordinary trading: flagged, not silently trained on.

A close-to-close move beyond the threshold (default 40 %, LDTM_MAX_DAILY_MOVE_PCT) is usually a
split or reverse split, a bad print, or a symbol reused by another company. A move on the ex-date of a
recorded corporate action whose factor matches it (e.g. a 10:1 split) is explained and not flagged
(`explained`, default: the recorded `corporate_actions`).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from sqlalchemy import Engine

from ldtm_core.config import setting_float
from ldtm_core.data.corporate_actions import explains, load_actions
from ldtm_core.data.prices import load_prices

DEFAULT_MAX_MOVE_PCT = 40.0
ENV_MAX_MOVE = "LDTM_MAX_DAILY_MOVE_PCT"

# (ticker, date, ratio close_t / close_{t-1}) -> True when a recorded corporate action explains the move.
Explainer = Callable[[str, dt.date, float], bool]


@dataclass(frozen=True)
class LargeMove:
    ticker: str
    date: dt.date
    prev_close: float
    close: float

    @property
    def pct(self) -> float:
        return (self.close / self.prev_close - 1.0) * 100.0

    def describe(self) -> str:
        return f"{self.ticker} {self.date}: close {self.prev_close:g} -> {self.close:g} ({self.pct:+.1f}%)"


def threshold_from_env() -> float:
    """LDTM_MAX_DAILY_MOVE_PCT, checked by config (a percent above 0)."""
    return setting_float(ENV_MAX_MOVE)


def large_moves(
    engine: Engine,
    tickers: Sequence[str],
    *,
    threshold_pct: float | None = None,
    since: dt.date | None = None,
    explained: Explainer | None = None,
) -> list[LargeMove]:
    """Every stored one-day close move beyond `threshold_pct` (on or after `since`) not `explained`.

    A move is |close_t / close_{t-1} - 1| in percent: a 2:1 split (-50 %) and a 1:10 reverse split
    (+900 %) both flag at the default 40 %.
    """
    threshold = threshold_from_env() if threshold_pct is None else threshold_pct
    if explained is None:  # default: a move on an ex-date matching its recorded split/dividend is explained
        explained = explains(load_actions(engine, list(tickers)))
    out: list[LargeMove] = []
    # The bars as stored: a split shows as a jump here, and a recorded action is what explains it.
    for ticker, frame in load_prices(engine, tickers, adjusted=False).items():
        if len(frame) < 2:
            continue
        close = frame["close"].to_numpy(dtype=np.float64)
        ratio = close[1:] / close[:-1]
        for i in np.flatnonzero(np.abs(ratio - 1.0) * 100.0 > threshold):
            day = frame["date"].iloc[i + 1]
            if since is not None and day < since:
                continue
            if explained(ticker, day, float(ratio[i])):
                continue
            out.append(LargeMove(ticker, day, float(close[i]), float(close[i + 1])))
    return out


def moves_since(
    engine: Engine, firsts: dict[str, dt.date], threshold_pct: float | None = None
) -> list[LargeMove]:
    """The unexplained large moves in what was just stored: per ticker, on or after its first new date
    (`firsts`). One check for every way prices come in (ingest csv, ingest fetch, the nightly)."""
    if not firsts:
        return []
    moves = large_moves(engine, sorted(firsts), threshold_pct=threshold_pct, since=min(firsts.values()))
    return [m for m in moves if m.date >= firsts[m.ticker]]
