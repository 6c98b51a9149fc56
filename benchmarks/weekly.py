"""Benchmark: the weekly loop as `retrain_job` + the promotion sensor run it, timed per phase.

    .venv/bin/python benchmarks/weekly.py --tickers 4
    .venv/bin/python benchmarks/weekly.py --tickers 103 --url postgresql+psycopg2://...   # the full universe

Phases, each on the same core functions the Dagster assets call:
  train     `checkpoints`: every ticker trained within the slot plan (one single-threaded worker per
            slot on a CPU), warm start from the active model as configured;
  backtest  `backtests`: each ticker's newest candidate, walk-forward with the default folds (3),
            within the slot plan like training (one single-threaded worker per slot), stored fold
            outcomes reused; folds cold as shipped (`--warm-folds` chains them, the default before
            issue 22);
  gate      `promotions` (fired by promotion_gate_sensor per backtest): the gate, promoting passes.
Data: N tickers of the full universe, 20 years of synthetic prices (seeded), in a throw-away SQLite
database unless --url names a server (a fresh database `ldtm_weekly_<pid>` is created and dropped,
also when the run is stopped with SIGTERM or Ctrl-C).

`--weeks 2` runs the loop twice on the same database: the second is "next week", 5 more sessions of
prices appended first (the synthetic market never rewrites a day when its range grows). The last week
ends at `--end` (default: the latest session of the calendar up to today), so `--end 2026-10-05
--weeks 2` makes the second week the one that completes a quarter (every fold moves), and the default
a week inside a quarter (the folds stay put and are reused).
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


from scratch_db import scratch_database  # noqa: E402

from ldtm_core.accountability.gate.backtest_pool import backtest_many  # noqa: E402
from ldtm_core.accountability.gate.gate import run_gate  # noqa: E402
from ldtm_core.config import Settings  # noqa: E402
from ldtm_core.data.calendar import calendar_bounds, sessions_between  # noqa: E402
from ldtm_core.data.ingest import ingest_synthetic  # noqa: E402
from ldtm_core.data.universe import load_universe  # noqa: E402
from ldtm_core.learning.backtest import DEFAULT_FOLDS  # noqa: E402
from ldtm_core.learning.backtest import DEFAULT_WARM_START as BACKTEST_WARM  # noqa: E402
from ldtm_core.learning.checkpoints import load_checkpoint  # noqa: E402
from ldtm_core.learning.gpu_slots import current_plan  # noqa: E402
from ldtm_core.learning.model import get_profile  # noqa: E402
from ldtm_core.learning.precision import amp_dtype, cpu_has_native_bf16, describe_cpu, precision_name  # noqa: E402
from ldtm_core.learning.training import parse_overrides  # noqa: E402
from ldtm_core.learning.training_pool import train_many  # noqa: E402
from ldtm_core.learning.warm_start import DEFAULT_WARM_START as TRAIN_WARM  # noqa: E402
from ldtm_core.migrate import upgrade  # noqa: E402
from ldtm_core.progress import ProgressLog  # noqa: E402

BACKTEST_FOLDS = DEFAULT_FOLDS  # the `backtests` asset's default


def _reporter(what: str, total: int):
    """One line per finished ticker: n/N, elapsed, ETA (and why, when it failed)."""
    log = ProgressLog(what, total)
    return lambda o: print(f"  {log.advance(f'{o.ticker} {o.status} {o.reason}'.strip())}", flush=True)


def _loop(engine, settings, tickers, args, overrides, plan, train_warm, bt_warm, week) -> None:
    """One weekly loop on what the database holds now: train, backtest, gate, each timed."""
    t = time.perf_counter()
    outcomes = train_many(
        settings,
        tickers,
        args.profile,
        overrides=overrides,
        plan=plan,
        warm_start=train_warm,
        on_outcome=_reporter("train", len(tickers)),
    )
    train_s = time.perf_counter() - t
    trained = [o for o in outcomes if o.status == "trained"]
    metrics = [load_checkpoint(o.checkpoint_path).metrics for o in trained]
    rate = [m["samples_per_s"] for m in metrics]
    print(
        f"train: {train_s:.1f} s wall for {len(trained)}/{len(outcomes)} trained; per ticker median "
        f"{statistics.median(o.duration_s for o in trained):.1f} s, epochs median "
        f"{statistics.median(o.epochs for o in trained)} ({min(o.epochs for o in trained)}-"
        f"{max(o.epochs for o in trained)}), best epoch median {statistics.median(m['best_epoch'] for m in metrics)}, "
        f"samples/s per worker median {statistics.median(rate):,.0f}",
        flush=True,
    )

    t = time.perf_counter()
    bt = backtest_many(
        settings,
        [o.ticker for o in trained],
        folds=args.folds,
        plan=plan,
        warm_start=bt_warm,
        on_outcome=_reporter("backtest", len(trained)),
    )
    results = [o.result for o in bt if o.result is not None]
    bt_s = time.perf_counter() - t
    if not results:
        raise SystemExit(f"week {week}: no ticker could be backtested; {bt[0].ticker}: {bt[0].reason}")
    fits = [f.fit for r in results for f in r.folds]
    folds = [f for f in fits if not f.reused] or fits
    print(
        f"backtest: {bt_s:.1f} s wall for {len(results)}/{len(bt)} tickers x {args.folds} folds; fit per fold median "
        f"{statistics.median(f.fit_s for f in folds):.1f} s, epochs median {statistics.median(f.epochs for f in folds)}; "
        f"direction accuracy mean {statistics.mean(r.direction_accuracy for r in results):.3f} "
        f"(always-up {statistics.mean(r.always_up_accuracy for r in results):.3f}); leakage "
        f"{sum(r.leakage_rows for r in results)}; folds reused {sum(r.reused_folds for r in results)}, "
        f"refit {sum(r.refit_folds for r in results)}",
        flush=True,
    )

    t = time.perf_counter()
    reports = [run_gate(engine, settings, o.ticker, model_id=o.model_id) for o in trained]
    gate_s = time.perf_counter() - t
    print(f"gate: {gate_s:.1f} s; promoted {sum(r.passed for r in reports)} of {len(reports)}")
    total = train_s + bt_s + gate_s
    print(
        f"weekly loop (week {week}): {total:.1f} s = train {train_s:.1f} + backtest {bt_s:.1f} + gate {gate_s:.1f}; "
        f"per ticker {total / max(1, len(tickers)):.1f} s -> 103 tickers ≈ {total / max(1, len(tickers)) * 103 / 60:.1f} min "
        "(linear projection)"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tickers", type=int, default=4, help="first N tickers of the full universe")
    ap.add_argument("--years", type=int, default=20)
    ap.add_argument("--profile", default="reference")
    ap.add_argument("--max-epochs", type=int, default=None, help="cap epochs (default: the profile's)")
    ap.add_argument("--amp", default=None, help="override ModelConfig.amp (default: the profile's, auto)")
    ap.add_argument("--set", action="append", default=[], help="override a model config field: key=value")
    ap.add_argument("--url", default=None, help="PostgreSQL server URL (default: SQLite in a temp dir)")
    ap.add_argument("--folds", type=int, default=BACKTEST_FOLDS, help="backtest folds per ticker")
    ap.add_argument("--cold-start", action="store_true", help="no warm starts (train nor backtest folds)")
    ap.add_argument(
        "--warm-folds",
        action=argparse.BooleanOptionalAction,
        default=BACKTEST_WARM,
        help="start backtest fold k+1 from fold k's weights (default: as shipped, cold)",
    )
    ap.add_argument("--weeks", type=int, default=1, help="loops on the same database, 5 sessions apart")
    ap.add_argument("--end", type=dt.date.fromisoformat, default=None, help="the last week's last session")
    args = ap.parse_args()

    overrides = {k: v for k, v in (("max_epochs", args.max_epochs), ("amp", args.amp)) if v is not None}
    overrides |= parse_overrides(args.set)
    cfg = get_profile(args.profile, **overrides)
    plan = current_plan()
    tickers = load_universe("full")[: args.tickers]
    _, last = calendar_bounds()
    end = args.end or min(last, dt.date.today())
    start = end - dt.timedelta(days=round(365.25 * args.years))
    recent = sessions_between(end - dt.timedelta(days=10 * args.weeks + 10), end)
    week_ends = [recent[-1 - 5 * k] for k in reversed(range(args.weeks))]
    import torch

    train_warm = TRAIN_WARM and not args.cold_start
    bt_warm = args.warm_folds and not args.cold_start
    print(f"CPU: {describe_cpu()}; cores {os.cpu_count()}; torch {torch.__version__}")
    print(
        f"settings: {len(tickers)} tickers ({', '.join(tickers[:8])}{'…' if len(tickers) > 8 else ''}), "
        f"{args.years} years synthetic {start}..{end} in {args.weeks} week(s) ending {', '.join(map(str, week_ends))}, profile {args.profile} {overrides or ''}, "
        f"training precision {precision_name(amp_dtype(cfg, torch.device('cpu')))} (amp={cfg.amp}, "
        f"native bf16 {cpu_has_native_bf16()}), slot plan {plan.kind} x{plan.total}, "
        f"warm start train {train_warm} / backtest folds {bt_warm}, {args.folds} folds, "
        f"db {'PostgreSQL' if args.url else 'SQLite'}",
        flush=True,
    )

    # A stop from outside (kill, a CI timeout) unwinds like Ctrl-C, so `finally` drops the server database.
    signal.signal(signal.SIGTERM, lambda signum, _frame: sys.exit(128 + signum))
    with (
        tempfile.TemporaryDirectory() as home,
        scratch_database(args.url or "sqlite://", "weekly", Path(home)) as url,
    ):
        engine = upgrade(url)
        settings = Settings(home=Path(home), database_url=url)
        settings.ensure_dirs()
        previous = None
        for week, week_end in enumerate(week_ends, 1):
            first = start if previous is None else sessions_between(previous, week_end)[1]
            t = time.perf_counter()
            ingest_synthetic(engine, tickers, first, week_end, seed=0)
            print(f"week {week}: ingest {first}..{week_end}: {time.perf_counter() - t:.1f} s", flush=True)
            _loop(engine, settings, tickers, args, overrides, plan, train_warm, bt_warm, week)
            previous = week_end
        engine.dispose()


if __name__ == "__main__":  # guard: the training pool spawns worker processes
    main()
