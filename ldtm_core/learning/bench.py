"""`ldtm bench train`: the project's training loop against a seed-style loop and the floor, side by side.

All variants train the same reference model (same initial weights, same AdamW) on identical
synthetic samples in one process, interleaved every 16 batches so background load hits them alike:

(a) the project's loop: `training_loop.EpochLoop` (what `fit` runs each epoch) over precomputed tensors;
(a+) the whole of `fit` (validation each epoch, cosine LR, early-stopping bookkeeping);
(b) a seed-style loop: a torch Dataset that slices and min-max-normalises each window in
    `__getitem__`, behind a DataLoader with batch 32;
(c) the floor: forward/backward/step over batches built before the clock starts.

It also measures epochs-to-early-stop (reference profile, one synthetic ticker), the throughput of
two single-threaded worker processes running at once, and projects a full 103-ticker retrain.
"""

from __future__ import annotations

import datetime as dt
import itertools
import math
import multiprocessing as mp
import os
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from ldtm_core.data.features import CLOSE_INDEX, compute_features
from ldtm_core.data.samples import SampleSet, build_samples
from ldtm_core.errors import InputError
from ldtm_core.learning.model import LDTM, ModelConfig, get_profile
from ldtm_core.learning.split import purged_split
from ldtm_core.learning.training_loop import EpochLoop, fit, make_optimizer

BENCH_TICKER = "AAPL"
SEED_BATCH = 32
CHUNK_BATCHES = 16
FULL_UNIVERSE = 103


@dataclass
class BenchData:
    samples: SampleSet  # labeled rows only, chronological
    features: np.ndarray  # [T, F] raw (un-normalised) feature rows behind the windows
    window: int


def bench_data(n_samples: int, window: int, seed: int = 0) -> BenchData:
    """One synthetic ticker's samples (the newest `n_samples` labeled rows) and its raw feature rows."""
    from ldtm_core.data.calendar import CALENDAR_START, latest_closed_session
    from ldtm_core.data.synthetic_market import generate

    # The default start, not calendar_bounds(): the calendar reaches further back once older data is read.
    first, end = dt.date.fromisoformat(CALENDAR_START), latest_closed_session()
    df = generate([BENCH_TICKER], first, end, seed=seed).drop(columns="ticker")
    samples = build_samples(df, window)
    labeled = np.flatnonzero(samples.labeled)
    if n_samples > len(labeled):
        raise InputError(
            f"--samples {n_samples}: one synthetic ticker gives at most {len(labeled)} labeled samples"
        )
    keep = labeled[-n_samples:]
    feats = compute_features(df).to_numpy(dtype=np.float64)
    # Sample i ends at feature row i + window - 1; keep the raw rows for the seed-style Dataset.
    return BenchData(samples=samples.subset(keep), features=feats[keep[0] : keep[-1] + window], window=window)


class SeedStyleDataset(Dataset):
    """The seed's data path: every item slices its window and normalises it in Python/NumPy."""

    def __init__(self, features: np.ndarray, target_close: np.ndarray, window: int):
        self.features, self.target_close, self.window = features, target_close, window

    def __len__(self) -> int:
        return len(self.target_close)

    def __getitem__(self, i: int):
        w = self.features[i : i + self.window]
        lo, hi = w.min(axis=0), w.max(axis=0)
        span = hi - lo
        x = np.where(span > 0, (w - lo) / np.where(span > 0, span, 1.0), 0.0)
        c_span = span[CLOSE_INDEX] if span[CLOSE_INDEX] > 0 else 1.0
        y = (self.target_close[i] - lo[CLOSE_INDEX]) / c_span
        return torch.from_numpy(x.astype(np.float32)), torch.from_numpy(y.astype(np.float32))


def _fresh(cfg: ModelConfig) -> tuple[nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(cfg.seed)
    model = LDTM(cfg)
    return model, make_optimizer(model, cfg, torch.device("cpu"))


def _floor_epoch(model, opt, batches, loss_fn) -> None:
    model.train()
    for xb, yb in batches:
        opt.zero_grad(set_to_none=True)
        loss_fn(model(xb), yb).backward()
        opt.step()


def _seed_epoch(model, opt, loader, loss_fn) -> None:
    model.train()
    for xb, yb in loader:
        opt.zero_grad()
        loss = loss_fn(model(xb), yb)
        loss.backward()
        opt.step()


@dataclass
class BenchResult:
    n_samples: int
    epochs: int
    threads: int
    rates: dict[str, float]  # samples/s per variant
    early_stop: dict = field(default_factory=dict)
    pool: dict = field(default_factory=dict)
    projection: dict = field(default_factory=dict)
    seconds: float = 0.0
    load: tuple[float, float] = (
        0.0,
        0.0,
    )  # 1-minute load average before and after: others' work skews every figure

    @property
    def ratios(self) -> dict[str, float]:
        r = self.rates
        return {"a/c": r["a"] / r["c"], "a/b": r["a"] / r["b"], "a+/c": r["a+"] / r["c"], "a+/a": r["a+/a"]}


def loop_throughput(n_samples: int, epochs: int, threads: int = 1, seed: int = 0) -> dict[str, float]:
    """Samples/s of variants a, a+, b, c over the same data, interleaved chunk by chunk."""
    torch.set_num_threads(threads)
    cfg = get_profile("reference", seed=seed)
    data = bench_data(n_samples, cfg.window, seed)
    s = data.samples
    x, y = torch.from_numpy(s.x), torch.from_numpy(s.y)
    n = len(x)
    loss_fn = nn.MSELoss()

    model_a, opt_a = _fresh(cfg)
    loop = EpochLoop(model_a, opt_a, cfg.batch_size)
    model_b, opt_b = _fresh(cfg)
    ds = SeedStyleDataset(data.features, s.target_close, cfg.window)
    loader = DataLoader(
        ds, batch_size=SEED_BATCH, shuffle=True, generator=torch.Generator().manual_seed(seed)
    )
    model_c, opt_c = _fresh(cfg)
    gen = torch.Generator().manual_seed(seed)
    perm = torch.randperm(n, generator=gen)
    batches = [
        (x[perm[i : i + cfg.batch_size]].contiguous(), y[perm[i : i + cfg.batch_size]].contiguous())
        for i in range(0, n, cfg.batch_size)
    ]

    # Warm-up (allocator, first-call dispatch) outside the clock.
    warm = min(256, len(x))
    loop.run(x[:warm], y[:warm], torch.arange(warm))
    _floor_epoch(model_c, opt_c, batches[:8], loss_fn)
    for i, (xb, yb) in enumerate(loader):
        _seed_epoch(model_b, opt_b, [(xb, yb)], loss_fn)
        if i >= 7:
            break

    # Interleave in chunks of CHUNK_BATCHES batches, rotating the order, so that load from other
    # processes on a shared box lands on every variant alike (epochs are seconds long; load shifts faster).
    spent = {"a": 0.0, "b": 0.0, "c": 0.0}
    bs, step = cfg.batch_size, cfg.batch_size * CHUNK_BATCHES
    for _ in range(epochs):
        perm_a = torch.randperm(n, generator=gen)
        it_b = iter(loader)
        for k, start in enumerate(range(0, n, step)):
            chunk_c = batches[start // bs : (start + step) // bs]
            runs = {
                "a": lambda start=start, perm_a=perm_a: loop.run(x, y, perm_a[start : start + step]),
                "b": lambda it_b=it_b: _seed_epoch(
                    model_b, opt_b, itertools.islice(it_b, CHUNK_BATCHES), loss_fn
                ),
                "c": lambda chunk_c=chunk_c: _floor_epoch(model_c, opt_c, chunk_c, loss_fn),
            }
            order = ["a", "b", "c"]
            order = order[k % 3 :] + order[: k % 3]
            for name in order:
                t = time.perf_counter()
                runs[name]()
                spent[name] += time.perf_counter() - t
    rates = {k: n * epochs / v for k, v in spent.items()}

    # (a+): the whole of fit() (validation on 15% more rows each epoch, LR schedule, best-state copies).
    # Its rate relative to (a) is the share of fit's own wall time spent inside the epoch loop, which
    # is measured within one run and so is not skewed by load drifting between separate timings.
    n_val = max(1, int(0.15 * n))
    va = s.subset(np.arange(n - n_val, n))
    res = fit(
        s, va, get_profile("reference", seed=seed, max_epochs=epochs, patience=epochs + 1), threads=threads
    )
    rates["a+/a"] = res.loop_s / res.duration_s
    rates["a+"] = rates["a"] * rates["a+/a"]
    return rates


def early_stop_run(threads: int = 1, seed: int = 0, max_epochs: int = 100) -> dict:
    """Reference profile on one synthetic ticker (~5,000 samples) with the real purged split."""
    torch.set_num_threads(threads)
    cfg = get_profile("reference", seed=seed, max_epochs=max_epochs)
    from ldtm_core.data.calendar import CALENDAR_START, latest_closed_session
    from ldtm_core.data.synthetic_market import generate

    first, end = dt.date.fromisoformat(CALENDAR_START), latest_closed_session()
    # Twenty years, like a long-listed ticker of the universe: ~5,000 samples.
    start = max(first, end.replace(year=end.year - 20))
    df = generate([BENCH_TICKER], start, end, seed=seed)
    samples = build_samples(df.drop(columns="ticker"), cfg.window)
    tr, va = purged_split(samples, cfg.val_fraction)
    res = fit(samples.subset(tr), samples.subset(va), cfg, threads=threads)
    return {
        "n_train": len(tr),
        "n_val": len(va),
        "epochs": res.epochs,
        "best_epoch": res.best_epoch,
        "val_loss": res.val_loss,
        "duration_s": res.duration_s,
        "samples_per_s": res.samples_per_s,
    }


def _pool_probe(n_samples: int, epochs: int, seed: int) -> float:
    torch.set_num_threads(1)
    cfg = get_profile("reference", seed=seed)
    s = bench_data(n_samples, cfg.window, seed).samples
    x, y = torch.from_numpy(s.x), torch.from_numpy(s.y)
    model, opt = _fresh(cfg)
    loop = EpochLoop(model, opt, cfg.batch_size)
    gen = torch.Generator().manual_seed(seed)
    warm = min(256, len(x))
    loop.run(x[:warm], y[:warm], torch.arange(warm))
    t = time.perf_counter()
    for _ in range(epochs):
        loop.run(x, y, torch.randperm(len(x), generator=gen))
    return len(x) * epochs / (time.perf_counter() - t)


def pool_throughput(workers: int, n_samples: int, epochs: int, seed: int = 0) -> dict:
    """`workers` spawned single-threaded processes running loop (a) at the same time."""
    ctx = mp.get_context("spawn")
    t = time.perf_counter()
    with ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
        rates = list(
            pool.map(
                _pool_probe, [n_samples] * workers, [epochs] * workers, [seed + i for i in range(workers)]
            )
        )
    return {"workers": workers, "per_worker": rates, "total": sum(rates), "wall_s": time.perf_counter() - t}


def _loadavg() -> float:
    try:
        return os.getloadavg()[0]
    except OSError:
        return float("nan")


def run_bench(
    n_samples: int = 4000,
    epochs: int = 3,
    threads: int = 1,
    early_stop: bool = True,
    pool_workers: int = 2,
    seed: int = 0,
) -> BenchResult:
    if n_samples < 64 or epochs < 1:
        raise InputError("--samples must be >= 64 and --epochs >= 1")
    t0 = time.perf_counter()
    load_before = _loadavg()
    rates = loop_throughput(n_samples, epochs, threads, seed)
    result = BenchResult(n_samples=n_samples, epochs=epochs, threads=threads, rates=rates)
    if pool_workers > 1:
        result.pool = pool_throughput(pool_workers, n_samples, epochs, seed)
    if early_stop:
        es = early_stop_run(threads, seed)
        result.early_stop = es
        # Per ticker: the measured single-process fit, slowed by the measured contention of
        # `pool_workers` concurrent processes; tickers run `pool_workers` at a time.
        workers = max(1, pool_workers)
        slowdown = 1.0
        if result.pool:
            slowdown = max(1.0, rates["a"] / (result.pool["total"] / workers))
        per_ticker = es["duration_s"] * slowdown
        result.projection = {
            "tickers": FULL_UNIVERSE,
            "workers": workers,
            "per_ticker_s": per_ticker,
            "contention_slowdown": slowdown,
            "wall_s": math.ceil(FULL_UNIVERSE / workers) * per_ticker,
        }
    result.seconds = time.perf_counter() - t0
    result.load = (load_before, _loadavg())
    return result


# ---------------------------------------------------------------------------------------------------
# Batch size x precision on one device (the GPU check runs it on a card; a CPU runs it too)
# ---------------------------------------------------------------------------------------------------


@dataclass
class GridCell:
    batch_size: int
    precision: str
    samples_per_s: float | None  # None where this device cannot train in this precision
    note: str = ""


def _precision_refusal(device: torch.device, precision: str) -> str:
    """Why `precision` cannot train here ('' where it can)."""
    from ldtm_core.learning.precision import cpu_can_run_bf16, no_bf16_kernels

    if device.type == "cpu" and precision == "fp16":
        return "fp16 autocast is a CUDA setting (slower than fp32 on a CPU)"
    if device.type == "cpu" and precision == "bf16" and not cpu_can_run_bf16():
        return no_bf16_kernels()
    if device.type == "cuda" and precision == "bf16" and not torch.cuda.is_bf16_supported():
        return "this card has no bf16"
    return ""


def precision_grid(
    device: str,
    batch_sizes: list[int],
    precisions: list[str],
    n_samples: int = 4000,
    epochs: int = 3,
    seed: int = 0,
) -> list[GridCell]:
    """Samples/s of the reference training step (`EpochLoop`, AdamW, fp16 with a GradScaler) for each
    batch size x precision, the same data and initial weights, cells interleaved epoch by epoch."""
    from ldtm_core.learning.precision import PRECISIONS
    from ldtm_core.learning.training_loop import resolve_device, setup_device

    unknown = [p for p in precisions if p not in PRECISIONS]
    if unknown or not precisions:
        raise InputError(
            f"--precisions: {', '.join(unknown) or '(none)'}; choose from {', '.join(PRECISIONS)}"
        )
    if not batch_sizes or min(batch_sizes) < 1:
        raise InputError(f"--batch-sizes must be positive integers, got {batch_sizes}")
    dev = resolve_device(device)
    setup_device(dev, torch.get_num_threads())
    cfg = get_profile("reference", seed=seed)
    s = bench_data(n_samples, cfg.window, seed).samples
    x, y = torch.from_numpy(s.x).to(dev), torch.from_numpy(s.y).to(dev)
    gen = torch.Generator().manual_seed(seed)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)

    loops, cells = {}, {}
    for bs in batch_sizes:
        for p in precisions:
            why = _precision_refusal(dev, p)
            cells[bs, p] = GridCell(bs, p, None, why)
            if why:
                continue
            model, _opt = _fresh(cfg)
            model = model.to(dev)
            opt = make_optimizer(model, cfg, dev)
            scaler = torch.amp.GradScaler("cuda") if p == "fp16" else None
            loops[bs, p] = EpochLoop(model, opt, bs, autocast_dtype=PRECISIONS[p], scaler=scaler)
    spent = dict.fromkeys(loops, 0.0)
    for key, loop in list(loops.items()):  # warm-up: kernel selection and cuDNN autotuning off the clock
        try:
            loop.run(x, y, torch.arange(min(len(x), 4 * key[0]), device=dev))
            sync()
        except RuntimeError as exc:
            cells[key].note = f"{type(exc).__name__}: {str(exc).splitlines()[0]}"
            del loops[key], spent[key]
    for _ in range(epochs):
        perm = torch.randperm(len(x), generator=gen).to(dev)
        for key, loop in loops.items():
            t = time.perf_counter()
            loop.run(x, y, perm)
            sync()
            spent[key] += time.perf_counter() - t
    for key, seconds in spent.items():
        cells[key].samples_per_s = len(x) * epochs / seconds
    return list(cells.values())
