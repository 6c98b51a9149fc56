"""Benchmark: training-recipe levers side by side on the same fits — precision, batch size with a
scaled learning rate, early-stopping patience (issue 12).

    .venv/bin/python benchmarks/recipe.py --tickers 8 --patience 5,7 \
        --variant fp32=amp:off --variant bf16=amp:bf16 --variant bf16-b64=amp:bf16,batch_size:64,lr:0.0014142

Each variant is the reference profile with some fields replaced. Per ticker and variant: the
candidate's fit (all labeled rows, purged split: validation loss, epochs) and the walk-forward
backtest folds (default 3: direction accuracy on the same test rows for every variant). A ticker's
variants run one after another in the same single-threaded worker (one worker per core), so each
pair of wall times is measured under the same load.

Patience needs no extra fits: a run with a shorter patience is a prefix of the longer run (same seed,
data, batch order and learning-rate schedule, as long as the schedule does not follow the validation
loss: `cosine` (T_max = `max_epochs`) and `cosine_expected` (T = `lr_decay_epochs`) are fixed in
advance; a `plateau` variant reports its own patience only). It stops at
the first epoch whose validation loss has not improved for `p` epochs and returns the best weights up
to there, so a per-epoch hook records, for each `p`, where it would have stopped and the best weights
then. Its wall time is the measured fit's, prorated by epochs run (one epoch costs the same
throughout a fit); the first ticker checks the prefix claim against a real shorter-patience fit.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import multiprocessing
import os
import statistics
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ldtm_core.data.calendar import calendar_bounds  # noqa: E402
from ldtm_core.data.feature_store import prices_and_features  # noqa: E402
from ldtm_core.data.ingest import ingest_synthetic  # noqa: E402
from ldtm_core.data.samples import SampleSet, build_samples  # noqa: E402
from ldtm_core.data.universe import load_universe  # noqa: E402
from ldtm_core.db import get_engine  # noqa: E402
from ldtm_core.errors import InputError  # noqa: E402
from ldtm_core.learning import split, training_loop  # noqa: E402
from ldtm_core.learning.backtest import DEFAULT_FOLDS, fold_rows, fold_spans, score  # noqa: E402
from ldtm_core.learning.model import LDTM, ModelConfig, get_profile  # noqa: E402
from ldtm_core.learning.precision import describe_cpu  # noqa: E402
from ldtm_core.learning.training import parse_overrides  # noqa: E402
from ldtm_core.migrate import upgrade  # noqa: E402


class StopPoints:
    """`on_epoch` hook: for each shorter patience, the epoch it stops at and its best weights then."""

    def __init__(self, patiences: list[int]):
        self.patiences = patiences
        self.best, self.best_epoch, self.stale, self.best_state = float("inf"), 0, 0, None
        self.curve: list[float] = []  # validation loss per epoch, for stopping rules studied offline
        self.stops: dict[
            int, tuple[int, int, float, dict]
        ] = {}  # p -> (stop epoch, best epoch, loss, weights)

    def __call__(self, epoch: int, val_loss: float, model: torch.nn.Module) -> None:
        self.curve.append(float(val_loss))
        if val_loss < self.best:
            self.best, self.best_epoch, self.stale = val_loss, epoch, 0
            self.best_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
        else:
            self.stale += 1
        for p in self.patiences:
            if p not in self.stops and self.stale >= p:
                self.stops[p] = (epoch, self.best_epoch, self.best, self.best_state)

    def result(self, p: int, fit: training_loop.FitResult, cfg: ModelConfig):
        """(epochs run, best epoch, val loss, model) of patience `p` (the fit itself where p never stopped)."""
        if p not in self.stops:
            return fit.epochs, fit.best_epoch, fit.val_loss, fit.model
        epochs, best_epoch, loss, state = self.stops[p]
        model = LDTM(cfg)
        model.load_state_dict(state)
        return epochs, best_epoch, loss, model.eval()


@torch.no_grad()
def _hits(model, test: SampleSet) -> int:
    pred = test.denormalise(model(torch.from_numpy(test.x)).numpy())[:, 0]
    return score(pred, test.target_close[:, 0], test.close)[0]


WARM_FOLDS = "warm_folds"  # not a ModelConfig field: fold k+1 fine-tunes fold k's weights, as `--warm-start`
# Not ModelConfig fields either: `profile:reference_b32` starts from another profile, `malloc:0` trains
# with glibc's malloc defaults (LDTM_TRAINING_MALLOC=0; a process-wide setting, so only with --fresh).
PROFILE, MALLOC = "profile", "malloc"


def parse_variant(spec: str) -> tuple[str, dict]:
    """`name=field:value,field:value` -> (name, overrides of the reference profile), values typed as
    `ldtm train --set` types them; `warm_folds:1` chains the backtest folds like `ldtm backtest --warm-start`."""
    name, _, fields = spec.partition("=")
    if not name or "=" not in spec:
        raise SystemExit(f"--variant {spec!r}: expected name=field:value[,field:value...]")
    overrides: dict = {}
    pairs = []
    for item in filter(None, fields.split(",")):
        key, _, value = item.partition(":")
        if not value:
            raise SystemExit(f"--variant {spec!r}: {item!r} is not field:value of ModelConfig")
        if key in (WARM_FOLDS, MALLOC):
            overrides[key] = bool(int(value))
        elif key == PROFILE:
            overrides[key] = value
        else:
            pairs.append(f"{key}={value}")
    try:
        overrides.update(parse_overrides(pairs))
    except InputError as e:
        raise SystemExit(f"--variant {spec!r}: {e}") from None
    _config(overrides)  # refuse an invalid combination before any training
    return name, overrides


def _config(overrides: dict) -> tuple[ModelConfig, bool]:
    """(the variant's config, whether its folds are warm-chained)."""
    fields = {k: v for k, v in overrides.items() if k not in (WARM_FOLDS, PROFILE, MALLOC)}
    return get_profile(overrides.get(PROFILE, "reference"), **fields), bool(overrides.get(WARM_FOLDS))


def _fit(train: SampleSet, val: SampleSet, cfg: ModelConfig, shorter: list[int], init_state=None):
    hook = StopPoints(shorter)
    fit = training_loop.fit(train, val, cfg, threads=1, init_state=init_state, on_epoch=hook)
    return fit, hook


def _one_variant(
    samples: SampleSet, ticker: str, cfg: ModelConfig, warm: bool, patiences: list[int], folds: int
) -> dict:
    # A warm chain with a shorter patience starts its folds from other weights: not derivable, so a
    # warm variant reports its own patience only (set `patience:` in the variant for a real run).
    # Likewise plateau: its cuts follow the patience, so a shorter patience is another run, not a prefix.
    prefix = cfg.lr_schedule != "plateau"
    every = (
        [cfg.patience]
        if warm or not prefix
        else sorted(set(p for p in patiences if p <= cfg.patience) | {cfg.patience})
    )
    shorter = every[:-1]
    # per patience: candidate (epochs, best epoch, val loss), fold hits, fold rows, epochs of all fits,
    # wall of all fits (measured for the profile's patience, prorated by epochs for shorter ones)
    out = {p: {"candidate": None, "hits": 0, "n": 0, "epochs": 0, "wall_s": 0.0} for p in every}
    tr, va = split.purged_split(samples, cfg.val_fraction)
    fit, hook = _fit(samples.subset(tr), samples.subset(va), cfg, shorter)
    for p in every:
        epochs, best_epoch, loss, _ = hook.result(p, fit, cfg)
        out[p]["candidate"] = (epochs, best_epoch, loss)
        out[p]["epochs"] += epochs
        out[p]["wall_s"] += fit.duration_s * epochs / fit.epochs
    out[every[-1]]["curve"] = hook.curve  # the measured run's; a shorter patience's is its prefix

    if not folds:  # the candidate fits alone (a retrain's work)
        return out
    evaluable, spans = fold_spans(samples, folds, None, ticker)
    labeled = np.flatnonzero(samples.labeled)
    init_state = None  # fold 1 always starts cold
    for span in spans:
        test_idx, _, pool = fold_rows(samples, evaluable, labeled, span.start, len(span.test_idx))
        ftr, fva = split.purged_split(samples.subset(pool), cfg.val_fraction)
        fit, hook = _fit(samples.subset(pool[ftr]), samples.subset(pool[fva]), cfg, shorter, init_state)
        if warm:
            init_state = fit.model.state_dict()
        test = samples.subset(test_idx)
        for p in every:
            epochs, _, _, model = hook.result(p, fit, cfg)
            out[p]["hits"] += _hits(model, test)
            out[p]["n"] += len(test_idx)
            out[p]["epochs"] += epochs
            out[p]["wall_s"] += fit.duration_s * epochs / fit.epochs
    return out


def _one_ticker(
    url: str, ticker: str, variants: dict[str, dict], patiences: list[int], folds: int, verify: bool
) -> dict:
    torch.set_num_threads(1)
    for overrides in variants.values():
        if MALLOC in overrides:  # read once per process by allocator.keep_freed_buffers: --fresh only
            os.environ["LDTM_TRAINING_MALLOC"] = "1" if overrides[MALLOC] else "0"
    prices, feats = prices_and_features(get_engine(url), ticker)
    result = {"ticker": ticker, "variants": {}}
    for name, overrides in variants.items():
        cfg, warm = _config(overrides)
        samples = build_samples(prices, cfg.window, features=feats.frame)
        if verify:  # one-off kernel builds are not charged to the first variant
            tr, va = split.purged_split(samples, cfg.val_fraction)
            training_loop.fit(
                samples.subset(tr), samples.subset(va), dataclasses.replace(cfg, max_epochs=1), threads=1
            )
        result["variants"][name] = _one_variant(samples, ticker, cfg, warm, patiences, folds)
    if verify:
        # The prefix claim, checked: a real fit with the shortest patience ends where the hook said.
        name, overrides = next(iter(variants.items()))
        cfg, _ = _config(overrides)
        p = min(result["variants"][name])
        if p < cfg.patience:
            samples = build_samples(prices, cfg.window, features=feats.frame)
            tr, va = split.purged_split(samples, cfg.val_fraction)
            real = training_loop.fit(
                samples.subset(tr), samples.subset(va), dataclasses.replace(cfg, patience=p), threads=1
            )
            derived = result["variants"][name][p]["candidate"]
            result["verified"] = (name, p, (real.epochs, real.best_epoch, real.val_loss), derived)
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tickers", type=int, default=8, help="N tickers spread over the full universe")
    ap.add_argument("--years", type=int, default=20)
    ap.add_argument("--patience", default="5,7", help="shorter patiences to compare with each variant's own")
    ap.add_argument(
        "--variant",
        action="append",
        metavar="NAME=FIELD:VALUE,...",
        help="reference profile with these fields replaced (repeatable; the first is the baseline); "
        "default: fp32=amp:off and bf16=amp:bf16",
    )
    ap.add_argument(
        "--folds", type=int, default=DEFAULT_FOLDS, help="backtest folds per ticker (0: the fits only)"
    )
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument(
        "--fresh",
        action="store_true",
        help="each (ticker, variant) in a fresh worker process, so no variant inherits another's allocator state",
    )
    ap.add_argument(
        "--json",
        type=Path,
        help="also write every result (with each candidate's validation-loss curve, on its variant's own patience) here",
    )
    args = ap.parse_args()
    variants = dict(parse_variant(v) for v in (args.variant or ["fp32=amp:off", "bf16=amp:bf16"]))
    if not args.fresh and any(MALLOC in v for v in variants.values()):
        raise SystemExit("a malloc: variant needs --fresh (the allocator setting is per process)")
    patiences = [int(p) for p in args.patience.split(",") if p]
    universe = load_universe("full")
    tickers = universe[:: max(1, len(universe) // args.tickers)][: args.tickers]
    _, last = calendar_bounds()
    end = min(last, dt.date.today())
    start = end - dt.timedelta(days=round(365.25 * args.years))
    print(f"CPU: {describe_cpu()}; {args.workers} worker(s) x 1 thread; torch {torch.__version__}")
    print(
        f"{len(tickers)} tickers {tickers}, {args.years} years synthetic {start}..{end}, {args.folds} folds"
    )
    for name, overrides in variants.items():
        cfg, warm = _config(overrides)
        print(
            f"  {name}: {overrides.get(PROFILE, 'reference')} with {overrides or 'nothing'} -> amp {cfg.amp}, batch {cfg.batch_size}, "
            f"lr {cfg.lr:g}, patience {cfg.patience}, max_epochs {cfg.max_epochs}, "
            f"folds {'warm-chained' if warm else 'cold'}"
        )
    with tempfile.TemporaryDirectory() as home:
        url = f"sqlite:///{home}/recipe.db"
        ingest_synthetic(upgrade(url), tickers, start, end, seed=0)
        t0 = time.perf_counter()
        fresh = {"max_tasks_per_child": 1} if args.fresh else {}
        with ProcessPoolExecutor(
            args.workers, mp_context=multiprocessing.get_context("spawn"), **fresh
        ) as pool:
            # --fresh: one task per (ticker, variant), the variants of a ticker submitted one after
            # another so that they run under the same load; otherwise one task per ticker.
            jobs = [
                [(t, variants)] if not args.fresh else [(t, {n: v}) for n, v in variants.items()]
                for t in tickers
            ]
            futures = [
                [
                    pool.submit(_one_ticker, url, t, vs, patiences, args.folds, i == 0 and j == 0)
                    for j, (t, vs) in enumerate(job)
                ]
                for i, job in enumerate(jobs)
            ]
            results = []
            for group in futures:
                parts = [f.result() for f in group]
                r = {**parts[0], "variants": {n: v for p in parts for n, v in p["variants"].items()}}
                results.append(r)
                line = "; ".join(
                    f"{name} {max(v.values(), key=lambda x: x['epochs'])['wall_s']:.0f} s"
                    for name, v in r["variants"].items()
                )
                print(f"  {r['ticker']}: {line}", flush=True)
        wall = time.perf_counter() - t0
    if "verified" in results[0]:
        name, p, real, derived = results[0]["verified"]
        same = real[:2] == derived[:2] and abs(real[2] - derived[2]) <= 1e-6 * max(1.0, abs(real[2]))
        print(
            f"prefix check on {results[0]['ticker']} ({name}, patience {p}): real fit (epochs, best, val loss) "
            f"{real} vs derived {derived}: {'ok' if same else 'MISMATCH'}"
        )
    print_table(results, wall, args.folds)
    if args.json:
        args.json.write_text(json.dumps({"cpu": describe_cpu(), "wall_s": wall, "results": results}))


def print_table(results: list[dict], wall: float, folds: int) -> None:
    base_name = next(iter(results[0]["variants"]))
    base_p = max(results[0]["variants"][base_name])
    base = [r["variants"][base_name][base_p] for r in results]
    base_wall = sum(b["wall_s"] for b in base)
    base_loss = statistics.mean(b["candidate"][2] for b in base)
    base_hits = sum(b["hits"] for b in base)
    print(
        f"\nwall {wall:.0f} s for {len(results)} tickers (per variant: one candidate fit + {folds} folds each)"
    )
    print(
        "| variant | patience | candidate epochs (median) | epochs, all fits | fit wall s (sum) | speed vs "
        f"{base_name} p{base_p} | val loss (mean) | Δ val loss | worse on | backtest dir. acc | Δ hits | n |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name in results[0]["variants"]:
        for p in sorted(results[0]["variants"][name]):
            rows = [r["variants"][name][p] for r in results]
            loss = statistics.mean(x["candidate"][2] for x in rows)
            worse = sum(x["candidate"][2] > b["candidate"][2] for x, b in zip(rows, base, strict=True))
            hits, n = sum(x["hits"] for x in rows), sum(x["n"] for x in rows)
            fit_wall = sum(x["wall_s"] for x in rows)
            print(
                f"| {name} | {p} | {statistics.median(x['candidate'][0] for x in rows):g} "
                f"| {sum(x['epochs'] for x in rows)} | {fit_wall:,.0f} | {base_wall / fit_wall:.2f}x "
                f"| {loss:.5f} | {100 * (loss / base_loss - 1):+.2f} % | {worse}/{len(rows)} "
                f"| {f'{hits / n:.3f}' if n else '—'} | {hits - base_hits:+d} | {n} |"
            )


if __name__ == "__main__":  # guard: the worker pool spawns processes
    main()
