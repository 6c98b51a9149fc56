"""Where the walk-forward backtest's folds sit: on the calendar (quarter ends), not counted back from
the newest session, so a fold's cutoff and test rows stay the same until a new quarter completes and
its stored outcome (`fold_cache`) can be reused. docs/architecture.md ("Backtest folds sit on the calendar") has the why.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ldtm_core.data.samples import SampleSet
from ldtm_core.errors import InputError

# Fold cutoffs sit on quarter ends (docs/architecture.md ("Backtest folds sit on the calendar")): folds change 4x a year, so
# most weeks reuse every stored fold; the price is up to a quarter of newest sessions covered only live.
FOLD_PERIOD = "Q"


def _d(value) -> dt.date:
    return pd.Timestamp(value).date()


@dataclass(frozen=True)
class FoldSpan:
    """Where one fold tests: rows `test_idx` of the samples; `cutoff` is the session before them."""

    start: int  # position in `evaluable` of the fold's first test row
    test_idx: np.ndarray
    cutoff: np.datetime64


def fold_spans(
    samples: SampleSet,
    folds: int,
    test_sessions: int | None = None,
    ticker: str = "",
    member: np.ndarray | None = None,
) -> tuple[np.ndarray, list[FoldSpan]]:
    """(evaluable rows, each fold's span, oldest first): the one fold geometry of the backtest.

    Folds are anchored to the calendar (`FOLD_PERIOD`, quarters): fold k tests on the sessions of one
    completed quarter (the first `test_sessions` of them when given) and its cutoff is the last session
    of the quarter before. A quarter is complete once a session after it exists (its last session then
    has its next-day answer). The `folds` newest completed quarters are the folds, so a fold's cutoff
    and test rows stay the same from week to week until a new quarter completes; sessions after the
    newest completed quarter are covered live (`covered_live`).

    The hyper-parameter search (`tuning`) reads its hold-out cutoff from here too, so the two can
    never disagree about where the backtest's first fold begins.

    `member` (one flag per sample row; None: every row) is the ticker's universe membership on each
    row's evening (`data.membership`): a fold tests only evenings on which the ticker was a member, and
    a quarter without one is no fold (survivorship: today's list is not applied to past quarters).
    """
    evaluable = np.flatnonzero(~np.isnan(samples.target_close[:, 0]) & (True if member is None else member))
    if len(samples) == 0:
        raise InputError(f"{ticker}: no samples (too few sessions for one window) cannot hold {folds} folds")
    periods = pd.PeriodIndex(pd.DatetimeIndex(samples.dates[evaluable]), freq=FOLD_PERIOD)
    newest = pd.Period(pd.Timestamp(samples.dates[-1]), freq=FOLD_PERIOD)
    # A partial first quarter (no session before it) cannot be tested: nothing precedes its cutoff.
    complete = [p for p in periods.unique() if p < newest and evaluable[periods == p][0] > 0]
    if len(complete) < folds:
        raise InputError(
            f"{ticker}: {len(complete)} completed quarter(s) of evaluable sessions"
            + ("" if member is None or member.all() else " as a member of the universe")
            + f" up to {_d(samples.dates[-1])} cannot hold {folds} folds (one quarter per fold)"
        )
    spans = []
    for p in complete[-folds:]:
        pos = np.flatnonzero(periods == p)
        block = min(len(pos), test_sessions or len(pos))
        test_idx = evaluable[pos[0] : pos[0] + block]
        spans.append(FoldSpan(int(pos[0]), test_idx, samples.dates[test_idx[0] - 1]))
    return evaluable, spans


def covered_live(samples: SampleSet, spans: list[FoldSpan]) -> tuple[dt.date, dt.date] | None:
    """(first, last) session after the newest fold's test rows: no fold tests them yet, the shadow
    evenings (live predictions filled back) do. None when the folds reach the newest session."""
    after = samples.dates[samples.dates > samples.dates[spans[-1].test_idx[-1]]]
    return (_d(after[0]), _d(after[-1])) if len(after) else None
