"""Training many tickers at once within the slot plan (SPEC §6), one worker process per slot.

How the work is spread (one single-threaded worker per CPU slot, one per GPU slot pinned to its card)
lives in `ticker_pool`; this module says what each worker does for a ticker.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from functools import partial

from sqlalchemy.engine import Engine

from ldtm_core.config import Settings
from ldtm_core.data.universe import validate_ticker
from ldtm_core.learning.checkpoints import clean_temp_files
from ldtm_core.learning.gpu_slots import SlotPlan
from ldtm_core.learning.ticker_pool import map_tickers, ticker_chunks, worker_devices
from ldtm_core.learning.training import TrainOutcome, train_ticker
from ldtm_core.learning.tuning_store import TickerSettings, ticker_settings
from ldtm_core.learning.warm_start import DEFAULT_WARM_START

__all__ = ["train_many", "ticker_chunks", "worker_devices"]


def train_with_settings(
    engine: Engine,
    ticker: str,
    device: str,
    threads: int,
    *,
    settings: Settings,
    per_ticker: dict[str, TickerSettings],
    as_of: dt.date | None,
    warm_start: bool,
) -> TrainOutcome:
    """Train `ticker` with its chosen settings (`per_ticker`: the profile's config, or its tuned trial)."""
    chosen = per_ticker[ticker]
    return train_ticker(
        engine,
        settings,
        ticker,
        chosen.cfg,
        chosen.profile,
        as_of=as_of,
        device=device,
        threads=threads,
        provenance=chosen.provenance,
        warm_start=warm_start,
    )


def train_many(
    settings: Settings,
    tickers: list[str],
    profile: str,
    overrides: dict | None = None,
    as_of: dt.date | None = None,
    plan: SlotPlan | None = None,
    max_workers: int | None = None,
    warm_start: bool = DEFAULT_WARM_START,
    on_outcome: Callable[[TrainOutcome], None] | None = None,
) -> list[TrainOutcome]:
    """Train every ticker; outcomes in the order given. Bad profile/overrides raise before any work.

    Profile `tuned` gives each ticker the best settings of its study, `reference` where it has none.
    `on_outcome` is called as each ticker finishes (completion order), e.g. to show progress.
    """
    tickers = [validate_ticker(t) for t in tickers]
    per_ticker = ticker_settings(settings.database_url, tickers, profile, overrides)
    if not tickers:
        return []
    # A run killed mid-write left temp files: remove them before any new checkpoint is written.
    clean_temp_files(settings.checkpoint_dir)
    work = partial(
        train_with_settings, settings=settings, per_ticker=per_ticker, as_of=as_of, warm_start=warm_start
    )
    return map_tickers(
        settings,
        tickers,
        work,
        failed=lambda ticker, reason: TrainOutcome(ticker, "failed", reason=reason),
        plan=plan,
        max_workers=max_workers,
        on_outcome=on_outcome,
    )
