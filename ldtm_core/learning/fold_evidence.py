"""Which evenings of a replay the stored backtest folds had already seen.

A replay (`ldtm predict --start/--end`) of evenings that a gate-judged backtest fold tested is not out of
fold: the gate chose the model on those evenings' outcomes. A fold's training window saw its evenings too
(the fold's model trained on them). `evenings_seen_by_folds` reads the stored folds' windows
(backtest_folds) and returns, per ticker, the replayed sessions inside them, so a replay or signal report
can say how many of its evenings were out of fold. `ldtm backtest --end D` keeps new folds before D.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from sqlalchemy import Engine, select

from ldtm_core.data.calendar import sessions_between
from ldtm_core.data.universe import validate_ticker
from ldtm_core.errors import InputError
from ldtm_core.schema import backtest_folds, gate_decisions


@dataclass(frozen=True)
class SeenByFolds:
    """The sessions `start`..`end` of each ticker that stored folds tested or trained on."""

    start: dt.date
    end: dt.date
    sessions: int  # XNYS sessions in start..end (per ticker)
    tested: dict[str, tuple[dt.date, ...]] = field(default_factory=dict)  # inside a fold's test window
    trained: dict[str, tuple[dt.date, ...]] = field(default_factory=dict)  # a training window's, not tested
    backtests: tuple[str, ...] = ()  # the backtests whose folds were read
    judged_only: bool = True

    @property
    def n_tested(self) -> int:
        return sum(len(v) for v in self.tested.values())

    @property
    def n_trained(self) -> int:
        return sum(len(v) for v in self.trained.values())

    def note(self, tickers: int | None = None) -> str:
        """One sentence for a replay or signal report."""
        which = "the folds the gate judged" if self.judged_only else "the stored backtest folds"
        total = f" of {self.sessions * tickers} ticker-evenings" if tickers else ""
        if not self.n_tested and not self.n_trained:
            return (
                f"out of fold: none{total} in {self.start}..{self.end} was tested or trained on by {which} "
                f"({len(self.backtests)} backtest(s) read)"
            )
        return (
            f"{self.n_tested}{total} in {self.start}..{self.end} were test evenings of {which} (the gate chose "
            f"on their outcomes: not out of fold) and {self.n_trained} more lay in a fold's training window "
            f"({len(self.backtests)} backtest(s) read); backtest with `ldtm backtest --end` before the "
            f"replay window for an out-of-fold replay"
        )


def evenings_seen_by_folds(
    engine: Engine,
    tickers: Iterable[str],
    start: dt.date,
    end: dt.date,
    *,
    judged_only: bool = True,
    backtest_ids: Sequence[str] | None = None,
) -> SeenByFolds:
    """Per ticker, the XNYS sessions of `start`..`end` that stored folds tested (`tested`) or only trained
    on (`trained`). The folds read: `backtest_ids` when given; else with `judged_only` (default) those of
    backtests the promotion gate judged (gate_decisions), else every stored fold of the tickers."""
    if start > end:
        raise InputError(f"start {start} is after end {end}")
    chosen = sorted({validate_ticker(t) for t in tickers})
    days = sessions_between(start, end)
    if not chosen or not days:
        return SeenByFolds(start, end, len(days), judged_only=judged_only)
    f = backtest_folds.c
    stmt = select(f.backtest_id, f.ticker, f.train_start, f.train_end, f.test_start, f.test_end).where(
        f.ticker.in_(chosen), f.test_end >= start, f.train_start <= end
    )
    if backtest_ids is not None:
        stmt = stmt.where(f.backtest_id.in_(list(backtest_ids)))
    elif judged_only:
        g = gate_decisions.c
        stmt = stmt.where(f.backtest_id.in_(select(g.backtest_id).where(g.ticker.in_(chosen))))
    with engine.connect() as conn:
        rows = conn.execute(stmt).all()
    tested: dict[str, set[dt.date]] = {}
    trained: dict[str, set[dt.date]] = {}
    for r in rows:
        for d in days:
            if r.test_start <= d <= r.test_end:
                tested.setdefault(r.ticker, set()).add(d)
            elif r.train_start <= d <= r.train_end:
                trained.setdefault(r.ticker, set()).add(d)
    return SeenByFolds(
        start,
        end,
        len(days),
        tested={t: tuple(sorted(v)) for t, v in sorted(tested.items())},
        trained={
            t: tuple(sorted(v - tested.get(t, set())))
            for t, v in sorted(trained.items())
            if v - tested.get(t, set())
        },
        backtests=tuple(sorted({r.backtest_id for r in rows})),
        judged_only=judged_only and backtest_ids is None,
    )
