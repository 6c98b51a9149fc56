"""Resuming a killed retrain: which tickers already got their candidate (or backtest) from this request.

A re-executed run passes the original run's start (and its `as_of`): a ticker whose newest
candidate was registered since then — and, with `as_of`, saw no prices after it — is done and is
skipped unless the caller forces a retrain; likewise a ticker whose folds were written since then.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

from sqlalchemy import Engine, func, select

from ldtm_core.schema import backtest_folds as bf
from ldtm_core.schema import model_registry as mr


def trained_since(
    engine: Engine, tickers: Sequence[str], since: dt.datetime, as_of: dt.date | None = None
) -> set[str]:
    """Tickers among `tickers` with a model registered at or after `since` (trained through <= as_of).

    Any status counts: the gate may already have promoted (or a rollback retired) that candidate.
    """
    if not tickers:
        return set()
    if since.tzinfo is None:
        raise ValueError("since must be timezone-aware (UTC)")
    conds = [mr.c.ticker.in_(list(tickers)), mr.c.created_at >= since]
    if as_of is not None:
        conds.append(mr.c.trained_on_date <= as_of)
    with engine.connect() as conn:
        rows = conn.execute(select(mr.c.ticker, func.count()).where(*conds).group_by(mr.c.ticker)).all()
    return {r[0] for r in rows}


def backtested_since(engine: Engine, tickers: Sequence[str], since: dt.datetime) -> set[str]:
    """Tickers among `tickers` with backtest folds written at or after `since`."""
    if not tickers:
        return set()
    if since.tzinfo is None:
        raise ValueError("since must be timezone-aware (UTC)")
    with engine.connect() as conn:
        rows = conn.execute(
            select(bf.c.ticker).where(bf.c.ticker.in_(list(tickers)), bf.c.created_at >= since).distinct()
        ).all()
    return {r[0] for r in rows}
