"""Training many tickers at once within the slot plan (SPEC §6).

CPU: N long-lived worker processes with one torch thread each (two single-threaded jobs beat one
two-threaded job on a 2-core box). GPU: one worker per slot, each pinned to its `cuda:i`, spread
over the cards. Workers are spawned once per call (a process start costs ~1.7 s) and each builds
its own engine from the database URL. One failing ticker never stops the others.
"""

from __future__ import annotations

import datetime as dt
import math
import multiprocessing as mp
import os
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass

from ldtm_core.config import Settings, mask_secrets
from ldtm_core.data.universe import validate_ticker
from ldtm_core.learning.checkpoints import clean_temp_files
from ldtm_core.learning.gpu_slots import SlotPlan, current_plan
from ldtm_core.learning.process_guard import die_with_parent
from ldtm_core.learning.training import TrainOutcome, train_ticker
from ldtm_core.learning.tuning_store import TickerSettings, ticker_settings
from ldtm_core.learning.warm_start import DEFAULT_WARM_START


@dataclass(frozen=True)
class _Job:
    settings: Settings
    per_ticker: dict[str, TickerSettings]
    as_of: dt.date | None
    warm_start: bool = False


# Per-worker state, set once by the initializer.
_WORKER: dict = {}


def _init_worker(job: _Job, devices) -> None:
    die_with_parent()  # a killed parent (CLI, Dagster step) takes its workers with it: no orphans
    # NVML numbers GPUs by PCI bus; make CUDA agree before anything initialises it.
    os.environ.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    device = devices.get()
    import torch

    from ldtm_core.db import get_engine

    torch.set_num_threads(1)
    _WORKER.update(job=job, device=device, engine=get_engine(job.settings.database_url))


def _train_in_worker(ticker: str) -> TrainOutcome:
    job: _Job = _WORKER["job"]
    device = _WORKER["device"]
    chosen = job.per_ticker[ticker]
    return train_ticker(
        _WORKER["engine"],
        job.settings,
        ticker,
        chosen.cfg,
        chosen.profile,
        as_of=job.as_of,
        device=device,
        threads=1,
        provenance=chosen.provenance,
        warm_start=job.warm_start,
    )


def worker_devices(plan: SlotPlan, workers: int) -> list[str]:
    if plan.kind == "cuda":
        import torch

        if torch.cuda.is_available():
            return plan.devices()[:workers]
    return ["cpu"] * workers


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
    report = on_outcome or (lambda _o: None)
    tickers = [validate_ticker(t) for t in tickers]
    per_ticker = ticker_settings(settings.database_url, tickers, profile, overrides)
    if not tickers:
        return []
    # A run killed mid-write left temp files: remove them before any new checkpoint is written.
    clean_temp_files(settings.checkpoint_dir)
    plan = plan or current_plan()
    slots = plan.total
    if plan.kind == "cuda":
        import torch

        if not torch.cuda.is_available():
            # NVML sees a GPU this torch build cannot use (CPU wheel): fall back to cores.
            from ldtm_core.learning.gpu_slots import cpu_count

            slots = cpu_count()
    workers = max(1, min(slots, len(tickers), max_workers or slots))
    devices = worker_devices(plan, workers)

    if workers == 1:
        from ldtm_core.db import get_engine

        engine = get_engine(settings.database_url)
        # In-process: the one job may use every core it was given (capped by max_workers).
        threads = max(1, min(slots, max_workers or slots))
        outcomes = []
        for t in tickers:
            o = train_ticker(
                engine,
                settings,
                t,
                per_ticker[t].cfg,
                per_ticker[t].profile,
                as_of=as_of,
                device=devices[0],
                threads=threads,
                provenance=per_ticker[t].provenance,
                warm_start=warm_start,
            )
            report(o)
            outcomes.append(o)
        return outcomes

    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    for d in devices:
        queue.put(d)
    job = _Job(settings=settings, per_ticker=per_ticker, as_of=as_of, warm_start=warm_start)
    by_ticker: dict[int, TrainOutcome] = {}
    with ProcessPoolExecutor(
        max_workers=workers, mp_context=ctx, initializer=_init_worker, initargs=(job, queue)
    ) as pool:
        futures = {pool.submit(_train_in_worker, t): i for i, t in enumerate(tickers)}
        for fut in as_completed(futures):
            i = futures[fut]
            try:
                outcome = fut.result()
            except Exception as exc:  # noqa: BLE001 - a crashed worker fails its ticker, not the run
                msg = mask_secrets(f"{type(exc).__name__}: {exc}", settings.database_url)
                outcome = TrainOutcome(
                    tickers[i], "failed", reason=msg.splitlines()[0] if msg else "worker died"
                )
            by_ticker[i] = outcome
            report(outcome)
    return [by_ticker[i] for i in range(len(tickers))]


def ticker_chunks(tickers: list[str], slots: int, per_slot: int = 4) -> list[list[str]]:
    """Split `tickers` into contiguous chunks, about `per_slot` per slot: each chunk is one pool step,
    so a slot that finishes early picks up another chunk instead of idling behind a long one."""
    if not tickers:
        return []
    n = min(len(tickers), max(1, slots) * max(1, per_slot))
    size = math.ceil(len(tickers) / n)
    return [tickers[i : i + size] for i in range(0, len(tickers), size)]
