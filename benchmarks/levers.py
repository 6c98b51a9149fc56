"""Benchmark: bf16 vs fp32 and warm vs cold starts, side by side in one process (issue 12).

    .venv/bin/python benchmarks/levers.py --tickers 5 --years 6 --max-epochs 30

Everything runs in this one process, one torch thread, interleaved where it can be, so background
load hits both sides alike. Synthetic prices (seeded) in a throw-away SQLite database.

speed    reference-model training step (`EpochLoop`) at batch 32/64/128, fp32 vs bf16 autocast,
         alternating chunks of batches over the same tensors and initial weights;
quality  per ticker, reference profile, same seed and purged split: `fit` in fp32 vs bf16
         (validation loss, always scored in fp32) and the walk-forward backtest (3 folds, cold);
warm     per ticker: last week's model (trained on prices up to 5 sessions earlier), then this
         week's retrain cold vs warm from it (epochs to best, wall, val loss); backtest folds cold
         vs warm-chained (fold k+1 from fold k), accuracy, wall, epochs to best, leakage.
On a CPU whose oneDNN has no bf16 kernels (AVX2 only) speed and quality are skipped and warm runs in fp32.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import multiprocessing
import statistics
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ldtm_core.config import Settings  # noqa: E402
from ldtm_core.data.calendar import calendar_bounds, sessions_between  # noqa: E402
from ldtm_core.data.ingest import ingest_frame  # noqa: E402
from ldtm_core.data.prices import load_ticker_prices  # noqa: E402
from ldtm_core.data.samples import build_samples  # noqa: E402
from ldtm_core.data.synthetic_market import generate  # noqa: E402
from ldtm_core.data.universe import load_universe  # noqa: E402
from ldtm_core.learning.backtest import run_backtest  # noqa: E402
from ldtm_core.learning.checkpoints import save_checkpoint  # noqa: E402
from ldtm_core.learning.model import LDTM, get_profile  # noqa: E402
from ldtm_core.learning.precision import (  # noqa: E402
    cpu_can_run_bf16,
    cpu_has_native_bf16,
    describe_cpu,
    no_bf16_kernels,
)
from ldtm_core.learning.registry import register_candidate  # noqa: E402
from ldtm_core.learning.split import purged_split  # noqa: E402
from ldtm_core.learning.training_loop import EpochLoop, fit, make_optimizer  # noqa: E402
from ldtm_core.migrate import upgrade  # noqa: E402


def speed(batches: tuple[int, ...], n_samples: int, rounds: int, profile: str = "reference") -> list[dict]:
    cfg = get_profile(profile)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n_samples, cfg.window, cfg.input_size, generator=g)
    y = torch.randn(n_samples, len(cfg.horizons), generator=g)
    out = []
    for bs in batches:
        loops, times = {}, {"fp32": 0.0, "bf16": 0.0}
        for name, dtype in (("fp32", None), ("bf16", torch.bfloat16)):
            torch.manual_seed(0)
            m = LDTM(cfg)
            loops[name] = EpochLoop(m, make_optimizer(m, cfg, torch.device("cpu")), bs, autocast_dtype=dtype)
        chunk = 16 * bs
        for loop in loops.values():  # warm-up: oneDNN builds its kernels on first use
            loop.run(x[:chunk], y[:chunk], torch.arange(chunk))
        for r in range(rounds):
            for name in ("fp32", "bf16") if r % 2 == 0 else ("bf16", "fp32"):
                for start in range(0, n_samples - chunk + 1, chunk):
                    t = time.perf_counter()
                    loops[name].run(x[start : start + chunk], y[start : start + chunk], torch.arange(chunk))
                    times[name] += time.perf_counter() - t
        done = rounds * (n_samples // chunk) * chunk
        fp32, bf16 = done / times["fp32"], done / times["bf16"]
        out.append({"batch": bs, "fp32": fp32, "bf16": bf16, "ratio": bf16 / fp32})
    return out


def speed_in_processes(
    n: int, batches: tuple[int, ...], n_samples: int, rounds: int, profile: str = "reference"
) -> list[dict]:
    """`speed` in `n` single-threaded processes started together; samples/s summed over them."""
    if n == 1:
        return speed(batches, n_samples, rounds, profile)
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(n, mp_context=ctx, initializer=torch.set_num_threads, initargs=(1,)) as pool:
        parts = list(pool.map(speed, *zip(*[(batches, n_samples, rounds, profile)] * n, strict=True)))
    out = []
    for rows in zip(*parts, strict=True):
        fp32, bf16 = sum(r["fp32"] for r in rows), sum(r["bf16"] for r in rows)
        out.append({"batch": rows[0]["batch"], "fp32": fp32, "bf16": bf16, "ratio": bf16 / fp32})
    return out


def stand_in_candidate(engine, settings: Settings, ticker: str, cfg) -> int:
    """run_backtest validates a registered candidate: an untrained one of `cfg` stands in (the folds
    fit their own models; the candidate's weights are never used)."""
    path = settings.checkpoint_dir / "candidates" / f"{ticker}_{cfg.signature}.pt"
    sha = save_checkpoint(path, LDTM(cfg).eval(), cfg, ticker, dt.date.today(), None)
    return register_candidate(
        engine, ticker=ticker, cfg=cfg, profile="benchmark", trained_on_date=dt.date.today(),
        checkpoint_path=str(path), checkpoint_sha256=sha, val_loss=None,
    )  # fmt: skip


def fit_on(prices, cfg, init_state=None):
    samples = build_samples(prices, cfg.window)
    tr, va = purged_split(samples, cfg.val_fraction)
    return fit(samples.subset(tr), samples.subset(va), cfg, threads=1, init_state=init_state)


def quality(engine, settings: Settings, tickers: list[str], base, fp32_cfg, bf16_cfg, folds: int) -> None:
    """Per ticker: `fit` in fp32 vs bf16 (same seed, split, data) and their cold backtests."""
    print("\n## quality: bf16 vs fp32 (same seed, split, data; val loss scored in fp32; cold backtests)")
    print(
        "| ticker | val fp32 | val bf16 | Δ | epochs fp32/bf16 | fit s fp32/bf16 | dir.acc fp32 | dir.acc bf16 |"
    )
    print("|---|---|---|---|---|---|---|---|")
    q = []
    warmup = load_ticker_prices(engine, tickers[0])
    for c in (fp32_cfg, bf16_cfg):  # one-off kernel builds are not charged to the first ticker
        fit_on(warmup, dataclasses.replace(c, max_epochs=1))
    for t in tickers:
        prices = load_ticker_prices(engine, t)
        a, b = fit_on(prices, fp32_cfg), fit_on(prices, bf16_cfg)
        mid = stand_in_candidate(engine, settings, t, base)
        bt_a = run_backtest(engine, settings, t, fp32_cfg, folds, mid, warm_start=False)
        bt_b = run_backtest(engine, settings, t, bf16_cfg, folds, mid, warm_start=False)
        q.append((a, b, bt_a, bt_b))
        print(
            f"| {t} | {a.val_loss:.5f} | {b.val_loss:.5f} | {100 * (b.val_loss / a.val_loss - 1):+.1f}% | "
            f"{a.epochs}/{b.epochs} | {a.duration_s:.1f}/{b.duration_s:.1f} | "
            f"{bt_a.direction_accuracy:.3f} | {bt_b.direction_accuracy:.3f} |",
            flush=True,
        )
    fa = sum(x[0].duration_s for x in q)
    fb = sum(x[1].duration_s for x in q)
    print(
        f"| all | {statistics.mean(x[0].val_loss for x in q):.5f} | {statistics.mean(x[1].val_loss for x in q):.5f} "
        f"| | | {fa:.1f}/{fb:.1f} ({fa / fb:.2f}x) | {statistics.mean(x[2].direction_accuracy for x in q):.3f} "
        f"| {statistics.mean(x[3].direction_accuracy for x in q):.3f} |"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tickers", type=int, default=5)
    ap.add_argument("--years", type=int, default=6)
    ap.add_argument("--max-epochs", type=int, default=30)
    ap.add_argument("--folds", type=int, default=3)
    ap.add_argument("--profile", default="reference", help="model profile for every fit and the speed test")
    ap.add_argument("--speed-samples", type=int, default=4096, help="at least 16 x the largest batch")
    ap.add_argument("--speed-batches", default="32,64,128", help="batch sizes of the speed test")
    ap.add_argument("--speed-rounds", type=int, default=2)
    ap.add_argument("--skip-speed", action="store_true")
    ap.add_argument("--speed-only", action="store_true", help="only the bf16 vs fp32 step speed")
    ap.add_argument(
        "--speed-processes",
        type=int,
        default=1,
        help="run the speed test in this many single-threaded processes at once (as the training workers "
        "do) and report their sum",
    )
    args = ap.parse_args()
    torch.set_num_threads(1)

    can_bf16 = cpu_can_run_bf16()
    no_bf16 = "" if can_bf16 else no_bf16_kernels()
    if not can_bf16 and args.speed_only:
        raise SystemExit(f"--speed-only compares bf16 with fp32, and {no_bf16}: nothing to compare here")
    print(f"CPU: {describe_cpu()}; torch {torch.__version__}; native bf16 detected: {cpu_has_native_bf16()}")
    if not can_bf16:
        print(f"{no_bf16}: the speed and quality comparisons are skipped; warm vs cold runs in fp32")
    if not args.skip_speed and can_bf16:
        n = args.speed_processes
        print(
            f"\n## speed: reference model training step, samples/s, {n} process(es) x 1 thread at once"
            + (" (sum)" if n > 1 else "")
            + ", interleaved"
        )
        print("| batch | fp32 | bf16 | bf16/fp32 |\n|---|---|---|---|")
        batches = tuple(int(b) for b in args.speed_batches.split(","))
        for r in speed_in_processes(n, batches, args.speed_samples, args.speed_rounds, args.profile):
            print(f"| {r['batch']} | {r['fp32']:,.0f} | {r['bf16']:,.0f} | {r['ratio']:.2f}x |", flush=True)
    if args.speed_only:
        return

    tickers = load_universe("full")[: args.tickers]
    _, last = calendar_bounds()
    end = min(last, dt.date.today())
    start = end - dt.timedelta(days=365 * args.years)
    base = get_profile(args.profile, max_epochs=args.max_epochs)
    fp32_cfg, bf16_cfg = dataclasses.replace(base, amp="off"), dataclasses.replace(base, amp="bf16")
    print(
        f"\nsettings: {args.profile} profile, max_epochs {args.max_epochs}, patience {base.patience}, "
        f"batch {base.batch_size}, {args.years} years synthetic (seed 0), {args.folds} folds, tickers {tickers}"
    )

    with tempfile.TemporaryDirectory() as home:
        url = f"sqlite:///{home}/levers.db"
        engine = upgrade(url)
        settings = Settings(home=Path(home), database_url=url)
        settings.ensure_dirs()
        ingest_frame(engine, generate(tickers, start, end, seed=0), "synthetic")

        if can_bf16:
            quality(engine, settings, tickers, base, fp32_cfg, bf16_cfg, args.folds)

        # what amp='auto' picks on this CPU
        cfg = bf16_cfg if can_bf16 and cpu_has_native_bf16() else fp32_cfg
        print(f"\n## warm vs cold ({'bf16' if cfg is bf16_cfg else 'fp32'}, as amp=auto picks on this CPU)")
        print(
            "retrain: last week's model = cold fit on prices up to 5 sessions earlier; this week's fit from it"
        )
        print(
            "| ticker | epochs to best cold/warm | epochs run cold/warm | wall s cold/warm | val cold | val warm |"
        )
        print("|---|---|---|---|---|---|")
        w = []
        for t in tickers:
            prices = load_ticker_prices(engine, t)
            prev_end = sessions_between(prices["date"].min(), prices["date"].max())[-6]
            prev = fit_on(prices[prices["date"] <= prev_end], cfg)
            cold = fit_on(prices, cfg)
            warm = fit_on(prices, cfg, init_state=prev.model.state_dict())
            w.append((cold, warm))
            print(
                f"| {t} | {cold.best_epoch}/{warm.best_epoch} | {cold.epochs}/{warm.epochs} | "
                f"{cold.duration_s:.1f}/{warm.duration_s:.1f} | {cold.val_loss:.5f} | {warm.val_loss:.5f} |",
                flush=True,
            )
        cs, ws = sum(c.duration_s for c, _ in w), sum(x.duration_s for _, x in w)
        print(
            f"| all | {statistics.mean(c.best_epoch for c, _ in w):.1f}/{statistics.mean(x.best_epoch for _, x in w):.1f} "
            f"| {statistics.mean(c.epochs for c, _ in w):.1f}/{statistics.mean(x.epochs for _, x in w):.1f} "
            f"| {cs:.1f}/{ws:.1f} ({cs / ws:.2f}x) | {statistics.mean(c.val_loss for c, _ in w):.5f} "
            f"| {statistics.mean(x.val_loss for _, x in w):.5f} |"
        )

        print(f"\nbacktest ({args.folds} folds): cold folds vs fold k+1 warm from fold k")
        print(
            "| ticker | dir.acc cold | dir.acc warm | wall s cold/warm | epochs cold | epochs warm | leakage cold/warm |"
        )
        print("|---|---|---|---|---|---|---|")
        b = []
        for t in tickers:
            mid = stand_in_candidate(engine, settings, t, cfg)
            cold = run_backtest(engine, settings, t, cfg, args.folds, mid, warm_start=False)
            warm = run_backtest(engine, settings, t, cfg, args.folds, mid, warm_start=True)
            b.append((cold, warm))
            print(
                f"| {t} | {cold.direction_accuracy:.3f} | {warm.direction_accuracy:.3f} | "
                f"{cold.duration_s:.1f}/{warm.duration_s:.1f} | {[f.fit.epochs for f in cold.folds]} | "
                f"{[f.fit.epochs for f in warm.folds]} | {cold.leakage_rows}/{warm.leakage_rows} |",
                flush=True,
            )
        cs, ws = sum(c.duration_s for c, _ in b), sum(x.duration_s for _, x in b)
        print(
            f"| all | {statistics.mean(c.direction_accuracy for c, _ in b):.3f} "
            f"| {statistics.mean(x.direction_accuracy for _, x in b):.3f} | {cs:.1f}/{ws:.1f} ({cs / ws:.2f}x) | | | |"
        )


if __name__ == "__main__":  # guard: --speed-processes spawns workers
    main()
