"""Benchmark: does the hyper-parameter search beat the reference settings out of sample?

    .venv/bin/python benchmarks/tuning.py --tickers AAPL,NVDA,TSLA --trials 8 --set max_epochs=8

For each ticker: an Optuna study (`ldtm_core.learning.tuning.tune`, data strictly before the backtest's first
fold), then the walk-forward backtest (`backtest.run_backtest`) of the reference settings and of the
study's best settings on the same prices and the same folds. `--set` applies to the search and to both
backtests alike (e.g. a smaller epoch budget), so neither side gets more training than the other.
Prints per ticker and pooled: next-day direction accuracy, always-up on the same rows, the skill test
(p-value of "beats always-up", when the backtest result exposes one) and mean |% error|.

Runs on synthetic prices in a throwaway SQLite database (or `--url`, e.g. a PostgreSQL database you
own: it writes prices, studies and backtest rows there). Nothing is promoted.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import optuna  # noqa: E402
from levers import stand_in_candidate  # noqa: E402  (benchmarks/ is on sys.path)

from ldtm_core.config import Settings  # noqa: E402
from ldtm_core.data.ingest import ingest_frame  # noqa: E402
from ldtm_core.data.synthetic_market import generate  # noqa: E402
from ldtm_core.learning import backtest, tuning  # noqa: E402
from ldtm_core.learning.model import ModelConfig, get_profile  # noqa: E402
from ldtm_core.learning.training import parse_overrides  # noqa: E402
from ldtm_core.migrate import upgrade  # noqa: E402

# Where the leaderboard's exact test ("beats always-up", SPEC §9) shows up on a backtest result once the
# backtest exposes it; the first attribute found is reported, else "n/a".
SKILL_ATTRS = ("skill_p_value", "p_value_vs_always_up", "p_value")


def skill_p(result: backtest.BacktestResult) -> float | None:
    for name in SKILL_ATTRS:
        value = getattr(result, name, None)
        if isinstance(value, int | float):
            return float(value)
    return None


def fmt(v, spec=".1%") -> str:
    return "n/a" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, spec)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tickers", default="AAPL,NVDA,TSLA")
    ap.add_argument("--start", default="2016-01-04", help="first synthetic session")
    ap.add_argument("--end", default="2025-06-30", help="last synthetic session")
    ap.add_argument("--trials", type=int, default=8, help="trials per ticker")
    ap.add_argument(
        "--set", dest="overrides", action="append", default=[], help="key=value for search and backtests"
    )
    ap.add_argument("--folds", type=int, default=backtest.DEFAULT_FOLDS)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--profile", default="reference", help="base profile of the search and of the reference side"
    )
    ap.add_argument("--url", default=None, help="database URL (default: a temporary SQLite file)")
    ap.add_argument("--json", default=None, help="also write the figures to this file")
    args = ap.parse_args()

    fixed = parse_overrides(args.overrides)
    tickers = [t.strip().upper() for t in args.tickers.split(",") if t.strip()]
    home = Path(tempfile.mkdtemp(prefix="ldtm-tuning-bench-"))
    url = args.url or f"sqlite:///{home / 'ldtm.db'}"
    settings = Settings(home=home, database_url=url)
    settings.ensure_dirs()
    engine = upgrade(url)
    ingest_frame(engine, generate(tickers, args.start, args.end, seed=args.seed), "synthetic")
    optuna.logging.set_verbosity(optuna.logging.WARNING)

    reference = get_profile(args.profile, **fixed)
    rows, pooled = [], {"reference": [0, 0, 0, 0.0], "tuned": [0, 0, 0, 0.0]}  # n, hits, up, sum |err|
    t_all = time.perf_counter()
    for ticker in tickers:
        t0 = time.perf_counter()
        study = tuning.tune(
            settings,
            [ticker],
            args.trials,
            fixed=fixed,
            base_profile=args.profile,
            seed=args.seed,
            folds=args.folds,
        )
        t_tune = time.perf_counter() - t0
        tuned = ModelConfig.from_dict(study.best_config)
        results = {}
        for label, cfg in (("reference", reference), ("tuned", tuned)):
            t1 = time.perf_counter()
            mid = stand_in_candidate(engine, settings, ticker, cfg)
            results[label] = backtest.run_backtest(engine, settings, ticker, cfg, args.folds, mid)
            results[label].duration_s = time.perf_counter() - t1
        ref, tun = results["reference"], results["tuned"]
        same_folds = [(f.window.test_start, f.window.test_end) for f in ref.folds] == [
            (f.window.test_start, f.window.test_end) for f in tun.folds
        ]
        first_cutoff = min(ref.folds[0].window.cutoff, tun.folds[0].window.cutoff)
        holdout_ok = study.holdout[ticker] <= first_cutoff.isoformat()
        print(
            f"\n{ticker}: study {study.study_name}, {study.n_trials} trials ({study.n_pruned} pruned, "
            f"{study.n_failed} failed) in {t_tune:.0f}s, best #{study.best_number} = {study.best_value:.4f}; "
            f"trial data before {study.holdout[ticker]}, backtest first cutoff {first_cutoff} "
            f"({'held out' if holdout_ok else 'OVERLAP'}); same test folds: {same_folds}"
        )
        print(f"  tuned settings: {json.dumps(study.best_params, sort_keys=True)}")
        for label, r in results.items():
            acc = pooled[label]
            acc[0] += r.n
            acc[1] += sum(f.scores.hits for f in r.folds)
            acc[2] += sum(f.scores.up_hits for f in r.folds)
            acc[3] += r.mean_abs_pct_error * r.n
            rows.append(
                {
                    "ticker": ticker,
                    "settings": label,
                    "n": r.n,
                    "direction_accuracy": r.direction_accuracy,
                    "always_up_accuracy": r.always_up_accuracy,
                    "skill_p_value": skill_p(r),
                    "mean_abs_pct_error": r.mean_abs_pct_error,
                    "leakage_rows": r.leakage_rows,
                    "backtest_s": round(r.duration_s, 1),
                    "same_folds": same_folds,
                    "holdout_before_first_cutoff": holdout_ok,
                }
            )

    print(
        f"\n{'ticker':8} {'settings':10} {'n':>5} {'dir acc':>8} {'always-up':>10} {'skill p':>8} {'mean |err|':>11} {'leak':>5}"
    )
    for r in rows:
        print(
            f"{r['ticker']:8} {r['settings']:10} {r['n']:>5} {fmt(r['direction_accuracy']):>8} "
            f"{fmt(r['always_up_accuracy']):>10} {fmt(r['skill_p_value'], '.3f'):>8} "
            f"{fmt(r['mean_abs_pct_error'], '.2f') + '%':>11} {r['leakage_rows']:>5}"
        )
    for label, (n, hits, up, err) in pooled.items():
        print(
            f"{'pooled':8} {label:10} {n:>5} {fmt(hits / n if n else None):>8} {fmt(up / n if n else None):>10} "
            f"{'':>8} {fmt(err / n if n else None, '.2f') + '%':>11}"
        )
    print(f"\nwall {time.perf_counter() - t_all:.0f}s; database {url}")
    if args.json:
        Path(args.json).write_text(
            json.dumps({"rows": rows, "pooled": pooled, "args": vars(args)}, indent=2, default=str)
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
