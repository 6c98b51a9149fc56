"""Benchmark: learning-rate schedules side by side on the same fits, over several seeds (issue 22).

    .venv/bin/python -u benchmarks/lr_schedule.py --tickers 8 --seeds 0,1,2

Each variant is the profile (default reference, as shipped) with some fields replaced; the default
variants are today's schedule (`cosine`, T_max = max_epochs = 100), `cosine_expected` (annealed over
`lr_decay_epochs`, 15, then held at a floor) and `plateau` (halved when validation stalls). Per ticker,
seed and variant: the candidate's fit on all labeled rows (purged split: validation loss, epochs to
early stop, validation direction accuracy) and the walk-forward backtest folds as the backtest runs
them (default 3, cold like the backtest's default, `--warm-folds` chains them: direction accuracy on
the same test rows for every variant). One
(ticker, seed) runs all its variants one after another in the same single-threaded worker, so each
comparison of wall times is made under the same load. The seed changes the initial weights and the
batch order; the spread of a variant's figures across seeds is the noise band a difference must
exceed before it means anything.
"""

from __future__ import annotations

import argparse
import datetime as dt
import multiprocessing
import os
import statistics
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from recipe import parse_variant  # noqa: E402

from ldtm_core.data.calendar import calendar_bounds  # noqa: E402
from ldtm_core.data.feature_store import prices_and_features  # noqa: E402
from ldtm_core.data.ingest import ingest_synthetic  # noqa: E402
from ldtm_core.data.samples import SampleSet, build_samples  # noqa: E402
from ldtm_core.data.universe import load_universe  # noqa: E402
from ldtm_core.db import get_engine  # noqa: E402
from ldtm_core.learning import split, training_loop  # noqa: E402
from ldtm_core.learning.backtest import (  # noqa: E402
    DEFAULT_FOLDS,
    DEFAULT_WARM_START,
    fold_rows,
    fold_spans,
    score,
)
from ldtm_core.learning.model import ModelConfig, get_profile  # noqa: E402
from ldtm_core.learning.precision import describe_cpu  # noqa: E402
from ldtm_core.migrate import upgrade  # noqa: E402

DEFAULT_VARIANTS = [
    "cosine=lr_schedule:cosine",
    "cosine_expected=lr_schedule:cosine_expected",
    "plateau=lr_schedule:plateau",
]


@torch.no_grad()
def _hits(model, samples: SampleSet) -> tuple[int, int]:
    """(right next-day directions, rows) of `model` on the labeled rows of `samples`."""
    s = samples.subset(np.flatnonzero(~np.isnan(samples.target_close[:, 0])))
    pred = s.denormalise(model(torch.from_numpy(s.x)).numpy())[:, 0]
    return score(pred, s.target_close[:, 0], s.close)[0], len(s)


def _one_variant(samples: SampleSet, ticker: str, cfg: ModelConfig, folds: int, warm: bool) -> dict:
    tr, va = split.purged_split(samples, cfg.val_fraction)
    fit = training_loop.fit(samples.subset(tr), samples.subset(va), cfg, threads=1)
    val_hits, val_n = _hits(fit.model, samples.subset(va))
    out = {
        "val_loss": fit.val_loss,
        "epochs": fit.epochs,
        "best_epoch": fit.best_epoch,
        "val_hits": val_hits,
        "val_n": val_n,
        "all_epochs": fit.epochs,
        "wall_s": fit.duration_s,
        "hits": 0,
        "n": 0,
        "precision": fit.precision,
    }
    evaluable, spans = fold_spans(samples, folds, None, ticker)
    labeled = np.flatnonzero(samples.labeled)
    init_state = None  # fold 1 always starts cold; with --warm-folds later folds chain warm
    for span in spans:
        test_idx, _, pool = fold_rows(samples, evaluable, labeled, span.start, len(span.test_idx))
        ftr, fva = split.purged_split(samples.subset(pool), cfg.val_fraction)
        f = training_loop.fit(
            samples.subset(pool[ftr]), samples.subset(pool[fva]), cfg, threads=1, init_state=init_state
        )
        if warm:
            init_state = f.model.state_dict()
        hits, n = _hits(f.model, samples.subset(test_idx))
        out["hits"] += hits
        out["n"] += n
        out["all_epochs"] += f.epochs
        out["wall_s"] += f.duration_s
    return out


def _one_task(url: str, ticker: str, seed: int, variants: dict[str, ModelConfig], folds: int, warm: bool):
    torch.set_num_threads(1)
    prices, feats = prices_and_features(get_engine(url), ticker)
    result = {"ticker": ticker, "seed": seed, "variants": {}}
    first = next(iter(variants.values()))
    samples = build_samples(prices, first.window, features=feats.frame)
    # One-off kernel builds are not charged to the first variant.
    tr, va = split.purged_split(samples, first.val_fraction)
    training_loop.fit(samples.subset(tr), samples.subset(va), replace(first, max_epochs=1), threads=1)
    for name, cfg in variants.items():
        cfg = replace(cfg, seed=seed)
        s = samples if cfg.window == first.window else build_samples(prices, cfg.window, features=feats.frame)
        result["variants"][name] = _one_variant(s, ticker, cfg, folds, warm)
    return result


def _spread(values: list[float], fmt: str) -> str:
    """mean [min, max] of per-seed values."""
    if len(values) == 1:
        return format(values[0], fmt)
    return f"{format(statistics.mean(values), fmt)} [{format(min(values), fmt)}, {format(max(values), fmt)}]"


def print_table(results: list[dict], wall: float, folds: int) -> None:
    names = list(results[0]["variants"])
    seeds = sorted({r["seed"] for r in results})
    base = names[0]

    def rows(name, seed=None):
        return [r["variants"][name] for r in results if seed is None or r["seed"] == seed]

    def per_seed(name, fn):
        return [fn(rows(name, s)) for s in seeds]

    def loss(rs):
        return statistics.mean(x["val_loss"] for x in rs)

    def acc(rs, key="hits", n="n"):
        return sum(x[key] for x in rs) / sum(x[n] for x in rs)

    def val_acc(rs):
        return acc(rs, "val_hits", "val_n")

    base_wall = sum(x["wall_s"] for x in rows(base))
    n_rows = sum(x["n"] for x in rows(base, seeds[0]))
    print(
        f"\nwall {wall:.0f} s for {len(results)} (ticker, seed) runs; per variant one candidate fit + "
        f"{folds} folds each; seeds {seeds}; per-seed figures as mean [min, max] over the seeds"
    )
    print(
        "| schedule | candidate epochs (median) | best epoch (median) | epochs, all fits | fit wall s (sum) "
        f"| speed vs {base} | val loss (mean of tickers) | Δ val loss vs {base} (per seed) | worse on "
        f"| val dir. acc | backtest dir. acc ({n_rows:,} rows per seed) | Δ backtest acc, points |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    base_loss, base_acc = per_seed(base, loss), per_seed(base, acc)
    for name in names:
        rs, b = rows(name), rows(base)
        fit_wall = sum(x["wall_s"] for x in rs)
        d_loss = [100 * (v / b0 - 1) for v, b0 in zip(per_seed(name, loss), base_loss, strict=True)]
        d_acc = [100 * (v - b0) for v, b0 in zip(per_seed(name, acc), base_acc, strict=True)]
        worse = sum(x["val_loss"] > y["val_loss"] for x, y in zip(rs, b, strict=True))
        print(
            f"| {name} | {statistics.median(x['epochs'] for x in rs):g} "
            f"| {statistics.median(x['best_epoch'] for x in rs):g} | {sum(x['all_epochs'] for x in rs):,} "
            f"| {fit_wall:,.0f} | {base_wall / fit_wall:.2f}x | {_spread(per_seed(name, loss), '.5f')} "
            f"| {_spread(d_loss, '+.2f')} % | {worse}/{len(rs)} | {_spread(per_seed(name, val_acc), '.3f')} "
            f"| {_spread(per_seed(name, acc), '.3f')} | {_spread(d_acc, '+.1f')} |"
        )
    if len(seeds) > 1:
        loss_band = 100 * (max(base_loss) / min(base_loss) - 1)
        acc_band = 100 * (max(base_acc) - min(base_acc))
        print(
            f"noise band ({base} across seeds {seeds}): val loss {loss_band:.2f} %, "
            f"backtest dir. acc {acc_band:.1f} points"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tickers", type=int, default=8, help="N tickers spread over the full universe")
    ap.add_argument("--years", type=int, default=20)
    ap.add_argument("--seeds", default="0,1,2", help="model seeds (initial weights, batch order)")
    ap.add_argument(
        "--variant",
        action="append",
        metavar="NAME=FIELD:VALUE,...",
        help="reference profile with these fields replaced (repeatable; the first is the baseline); "
        "default: cosine, cosine_expected, plateau",
    )
    ap.add_argument(
        "--set", action="append", default=[], metavar="FIELD:VALUE", help="applies to every variant"
    )
    ap.add_argument("--folds", type=int, default=DEFAULT_FOLDS)
    ap.add_argument(
        "--warm-folds",
        action=argparse.BooleanOptionalAction,
        default=DEFAULT_WARM_START,
        help="start fold k+1 from fold k's weights (default: as the backtest, cold)",
    )
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    args = ap.parse_args()
    common = ",".join(args.set)
    variants = {}
    for spec in args.variant or DEFAULT_VARIANTS:
        name, overrides = parse_variant(f"{spec},{common}" if common else spec)
        variants[name] = get_profile("reference", **overrides)
    seeds = [int(s) for s in args.seeds.split(",") if s]
    warm = args.warm_folds
    universe = load_universe("full")
    tickers = universe[:: max(1, len(universe) // args.tickers)][: args.tickers]
    _, last = calendar_bounds()
    end = min(last, dt.date.today())
    start = end - dt.timedelta(days=round(365.25 * args.years))
    print(f"CPU: {describe_cpu()}; {args.workers} worker(s) x 1 thread; torch {torch.__version__}")
    print(
        f"{len(tickers)} tickers {tickers}, {args.years} years synthetic {start}..{end}, seeds {seeds}, "
        f"{args.folds} folds ({'warm-chained' if warm else 'cold'})"
    )
    for name, cfg in variants.items():
        decay = (
            f", anneals over {training_loop.decay_epochs(cfg)} epochs"
            if cfg.lr_schedule == "cosine_expected"
            else ""
        )
        print(
            f"  {name}: lr_schedule {cfg.lr_schedule}{decay}; amp {cfg.amp}, batch {cfg.batch_size}, "
            f"lr {cfg.lr:g}, patience {cfg.patience}, max_epochs {cfg.max_epochs}"
        )
    with tempfile.TemporaryDirectory() as home:
        url = f"sqlite:///{home}/lr_schedule.db"
        ingest_synthetic(upgrade(url), tickers, start, end, seed=0)
        t0 = time.perf_counter()
        with ProcessPoolExecutor(args.workers, mp_context=multiprocessing.get_context("spawn")) as pool:
            # Seed-major: an interrupted run still has whole seeds.
            futures = [
                pool.submit(_one_task, url, t, seed, variants, args.folds, warm)
                for seed in seeds
                for t in tickers
            ]
            results = []
            for f in futures:
                r = f.result()
                results.append(r)
                line = "; ".join(
                    f"{n} {v['epochs']} ep ({v['all_epochs']} all fits) val {v['val_loss']:.5f} "
                    f"acc {v['hits'] / v['n']:.3f} "
                    f"{v['wall_s']:.0f} s"
                    for n, v in r["variants"].items()
                )
                precision = next(iter(r["variants"].values()))["precision"]
                print(f"  {r['ticker']} seed {r['seed']} ({precision}): {line}", flush=True)
        wall = time.perf_counter() - t0
    print_table(results, wall, args.folds)


if __name__ == "__main__":  # guard: the worker pool spawns processes
    main()
