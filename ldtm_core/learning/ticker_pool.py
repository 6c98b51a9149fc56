"""One piece of GPU/CPU work per ticker, spread over the slot plan (SPEC §6): training and backtests.

CPU: N long-lived worker processes with one torch thread each (two single-threaded jobs beat one
two-threaded job on a 2-core box). GPU: one worker per slot, each pinned to its `cuda:i`, spread
over the cards. Workers are spawned once per call (a process start costs ~1.7 s) and each builds
its own engine from the database URL. One failing ticker never stops the others.
"""

from __future__ import annotations

import math
import multiprocessing as mp
import os
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from typing import Protocol, TypeVar

from sqlalchemy.engine import Engine

from ldtm_core.config import Settings, mask_secrets
from ldtm_core.learning.gpu_slots import SlotPlan, cpu_count, current_plan
from ldtm_core.learning.process_guard import die_with_parent

T = TypeVar("T")


class TickerWork(Protocol[T]):
    """`work(engine, ticker, device, threads)`: a module-level function (or a partial of one), so a
    spawned worker can unpickle it."""

    def __call__(self, engine: Engine, ticker: str, device: str, threads: int) -> T: ...


# Per-worker state, set once by the initializer.
_WORKER: dict = {}


def _init_worker(database_url: str, work: TickerWork, devices) -> None:
    die_with_parent()  # a killed parent (CLI, Dagster step) takes its workers with it: no orphans
    # NVML numbers GPUs by PCI bus; make CUDA agree before anything initialises it.
    os.environ.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    device = devices.get()
    import torch

    from ldtm_core.db import get_engine

    torch.set_num_threads(1)
    _WORKER.update(work=work, device=device, engine=get_engine(database_url))


def _run_in_worker(ticker: str):
    return _WORKER["work"](_WORKER["engine"], ticker, _WORKER["device"], 1)


def worker_devices(plan: SlotPlan, workers: int) -> list[str]:
    if plan.kind == "cuda":
        import torch

        if torch.cuda.is_available():
            return plan.devices()[:workers]
    return ["cpu"] * workers


def usable_slots(plan: SlotPlan) -> int:
    """The plan's slots, or the CPU cores where NVML sees a GPU this torch build cannot use (CPU wheel)."""
    if plan.kind == "cuda":
        import torch

        if not torch.cuda.is_available():
            return cpu_count()
    return plan.total


def ticker_chunks(tickers: list[str], slots: int, per_slot: int = 4) -> list[list[str]]:
    """Split `tickers` into contiguous chunks, about `per_slot` per slot: each chunk is one pool step,
    so a slot that finishes early picks up another chunk instead of idling behind a long one."""
    if not tickers:
        return []
    n = min(len(tickers), max(1, slots) * max(1, per_slot))
    size = math.ceil(len(tickers) / n)
    return [tickers[i : i + size] for i in range(0, len(tickers), size)]


def map_tickers(
    settings: Settings,
    tickers: list[str],
    work: TickerWork[T],
    failed: Callable[[str, str], T],
    plan: SlotPlan | None = None,
    max_workers: int | None = None,
    on_outcome: Callable[[T], None] | None = None,
) -> list[T]:
    """`work` for every ticker within the slot plan; results in the order given.

    A worker that raises or dies gives `failed(ticker, reason)` for its ticker. `on_outcome` is called
    as each ticker finishes (completion order), e.g. to show progress.
    """
    report = on_outcome or (lambda _o: None)
    if not tickers:
        return []
    plan = plan or current_plan()
    slots = usable_slots(plan)
    workers = max(1, min(slots, len(tickers), max_workers or slots))
    devices = worker_devices(plan, workers)

    if workers == 1:
        from ldtm_core.db import get_engine

        engine = get_engine(settings.database_url)
        # In-process: the one job may use every core it was given (capped by max_workers).
        threads = max(1, min(slots, max_workers or slots))
        outcomes = []
        for t in tickers:
            o = work(engine, t, devices[0], threads)
            report(o)
            outcomes.append(o)
        return outcomes

    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    for d in devices:
        queue.put(d)
    by_index: dict[int, T] = {}
    with ProcessPoolExecutor(
        max_workers=workers,
        mp_context=ctx,
        initializer=_init_worker,
        initargs=(settings.database_url, work, queue),
    ) as pool:
        futures = {pool.submit(_run_in_worker, t): i for i, t in enumerate(tickers)}
        for fut in as_completed(futures):
            i = futures[fut]
            try:
                outcome = fut.result()
            except Exception as exc:  # noqa: BLE001 - a crashed worker fails its ticker, not the run
                msg = mask_secrets(f"{type(exc).__name__}: {exc}", settings.database_url)
                outcome = failed(tickers[i], msg.splitlines()[0] if msg else "worker died")
            by_index[i] = outcome
            report(outcome)
    return [by_index[i] for i in range(len(tickers))]
