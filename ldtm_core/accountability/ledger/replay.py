"""Replay a range of evenings in one process (`ldtm predict --start D1 --end D2`), as the Dagster
snapshots backfill does: each session is one ordinary `predict` run (its own run_log row, its own
hash-chained rows, rerun = no-op), and each checkpoint is loaded once for the whole range (the
verified-model cache in `snapshots`)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence

from sqlalchemy import Engine

from ldtm_core.accountability.ledger.snapshots import PredictResult, predict
from ldtm_core.config import Settings
from ldtm_core.data.calendar import sessions_between
from ldtm_core.data.prices import earliest_price_date, latest_price_date
from ldtm_core.errors import InputError, NotFoundError
from ldtm_core.learning.registry import serving_models


def predict_range(
    engine: Engine,
    settings: Settings,
    start: dt.date,
    end: dt.date,
    tickers: Sequence[str] | None = None,
    mode: str | None = None,
    neutral_band_pct: float | None = None,
    on_session: Callable[[PredictResult], None] | None = None,
) -> list[PredictResult]:
    """Predict every XNYS session from `start` to `end` (inclusive), oldest first.

    The whole range is checked before anything is written: a range with no session, starting before
    the earliest or ending after the newest close of the tickers with a model, is refused.
    """
    if start > end:
        raise InputError(f"--start {start} is after --end {end}")
    days = sessions_between(start, end)
    if not days:
        raise InputError(f"no XNYS trading session between {start} and {end}")
    models = serving_models(engine, list(tickers) if tickers is not None else None)
    latest = latest_price_date(engine, list(models)) if models else None
    if latest is None:
        raise NotFoundError("no prices for any ticker with a model: ingest prices and train models first")
    if days[-1] > latest:
        raise InputError(f"--end {end}: the newest close of the tickers with a model is {latest}")
    earliest = earliest_price_date(engine, list(models))
    if earliest is not None and days[0] < earliest:
        raise InputError(
            f"--start {start} is before the earliest close of the tickers with a model ({earliest}); "
            f"start on or after it"
        )
    results = []
    for day in days:
        result = predict(engine, settings, day, tickers, mode, neutral_band_pct)
        results.append(result)
        if on_session is not None:
            on_session(result)
    return results
