"""Benchmark: the false rate and power of the signal report's Sharpe tests.

    .venv/bin/python benchmarks/sharpe_null.py            # 2,000 samples per series cell, 300 universes
    .venv/bin/python benchmarks/sharpe_null.py --quick    # a smoke run (seconds)

Each figure is the share of samples whose probability reaches 0.95 (a one-sided test at 5 %).
Series cells go through `signals.stats.summary` (what the report's summary calls per book): a book of
`T` evenings, AR(1) with coefficient `phi`, against a benchmark; "no skill" gives the book the
benchmark's true Sharpe (0: the boundary of the null); "edge SR" plants a true per-session Sharpe.
  P(SR > bench)  the report's Ledoit-Wolf HAC test of the Sharpe difference;
  old vs bench   what main printed: PSR(book, SR* = the benchmark's sample Sharpe), i.i.d.;
  PSR vs 0       the report's PSR on the effective sessions;  old PSR vs 0: the i.i.d. PSR.
Universe cells go through `signals.signals.report_from_rows` (the whole report on rows: books, costs,
benchmark, summary): `names` tickers sharing a market factor, `T` evenings, predictions with no skill
(or `edge` x the realised return), same-close execution; the long/short (about market-neutral) and the
long-only (beta about 1) books, without costs (a cost would make a no-skill book worse than no skill),
against the equal-weight universe; DSR after 1 trial.
It prints Markdown tables and the CPU (`lscpu` model name).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from scipy.signal import lfilter  # noqa: E402

from ldtm_core.accountability.signals import stats as signal_stats  # noqa: E402
from ldtm_core.accountability.signals.execution import with_held  # noqa: E402
from ldtm_core.accountability.signals.portfolios import LABELS  # noqa: E402
from ldtm_core.accountability.signals.rows import Rows, with_returns  # noqa: E402
from ldtm_core.accountability.signals.signals import report_from_rows  # noqa: E402
from ldtm_core.accountability.signals.stats import Trials  # noqa: E402
from ldtm_core.horizons import NAMES  # noqa: E402
from ldtm_core.learning.precision import describe_cpu  # noqa: E402

PASS = 0.95
SD = 0.01  # the series' daily standard deviation


def ar1(rng, n: int, phi: float, sr: float = 0.0) -> np.ndarray:
    """Stationary AR(1) with standard deviation SD and true per-session Sharpe `sr`."""
    e = rng.standard_normal(n) * SD * math.sqrt(1 - phi * phi)
    e[0] = rng.standard_normal() * SD
    return lfilter([1.0], [1.0, -phi], e) + sr * SD


def series_cell(rng, reps: int, n: int, phi: float, sr: float, bench_phi: float) -> dict:
    days = [d.date() for d in pd.bdate_range("2020-01-02", periods=n)]
    hits = np.zeros(4)
    for _ in range(reps):
        book = pd.Series(ar1(rng, n, phi, sr), index=days)
        bench = pd.Series(ar1(rng, n, bench_phi), index=days)
        s = signal_stats.summary(book, 1, bench)
        old_bench = signal_stats.psr(book, signal_stats.sharpe_per_period(bench))
        old_zero = signal_stats.psr(book, 0.0)
        hits += np.array([s["p_sharpe_above_benchmark"], old_bench, s["psr_vs_0"], old_zero]) >= PASS
    return dict(zip(["P(SR > bench)", "old vs bench", "PSR vs 0", "old PSR vs 0"], hits / reps, strict=True))


def universe_rows(rng, n: int, names: int, edge: float) -> tuple[Rows, pd.Series]:
    market = rng.standard_normal((n, 1)) * 0.008
    real = market + rng.standard_normal((n, names)) * 0.015
    pred = edge * real + rng.standard_normal((n, names)) * 0.015
    days = [d.date() for d in pd.bdate_range("2021-01-04", periods=n)]
    ticker = np.tile([f"T{i:03d}" for i in range(names)], n)
    p, a = pred.ravel(), real.ravel()
    frame = pd.DataFrame(
        {"ticker": ticker, "run_date": np.repeat(days, names), "in_sample": False, "model_status": "active",
         "run_date_close": 100.0,
         "direction_pred": np.where(p > 0.0025, "bullish", np.where(p < -0.0025, "bearish", "neutral"))}
    )  # fmt: skip
    for h in NAMES:
        frame[f"{h}_date"], frame[f"{h}_pred"], frame[f"{h}_actual"] = (
            frame["run_date"],
            100 * (1 + p),
            100 * (1 + a),
        )
    rows = with_held(with_returns(frame), "same_close")
    return Rows(rows, sorted(set(ticker)), 0, 0, 0, pd.DataFrame()), pd.Series(real.mean(axis=1), index=days)


def universe_cell(rng, reps: int, n: int, names: int, edge: float) -> dict:
    out = {}
    for _ in range(reps):
        rows, bench = universe_rows(rng, n, names, edge)
        report = report_from_rows(rows, bench, 0.0, Trials(1, "benchmark"), execution="same_close")
        s = report.summary().set_index(["portfolio", "basis"])
        for book in ("long_short", "long_only"):
            r = s.loc[(LABELS[book], "net")]
            daily = report.portfolios[book].daily.set_index("run_date")["net"]
            figures = {
                "P(SR > bench)": r["p_sharpe_above_benchmark"],
                "old vs bench": signal_stats.psr(daily, signal_stats.sharpe_per_period(bench)),
                "PSR vs 0": r["psr_vs_0"],
                "DSR (1 trial)": r["dsr"],
            }
            for k, v in figures.items():
                out[(book, k)] = out.get((book, k), 0) + (v >= PASS)
    return {k: v / reps for k, v in out.items()}


def pct(v: float) -> str:
    return f"{100 * v:5.1f} %"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=2000, help="samples per series cell")
    ap.add_argument("--universes", type=int, default=300, help="universes per universe cell")
    ap.add_argument("--quick", action="store_true", help="a smoke run: 40 samples, 10 universes")
    ap.add_argument("--seed", type=int, default=40)
    args = ap.parse_args()
    reps, universes = (40, 10) if args.quick else (args.reps, args.universes)
    rng = np.random.default_rng(args.seed)
    t0 = time.perf_counter()
    print(f"# Sharpe tests: share of samples at >= {PASS} (nominal 5 % under no skill)\n")
    print(f"Series through signals.stats.summary, {reps} samples per row; benchmark i.i.d. unless stated.\n")
    cols = ["P(SR > bench)", "old vs bench", "PSR vs 0", "old PSR vs 0"]
    print("| case | T | book phi | " + " | ".join(cols) + " |")
    print("|---|---:|---:|" + "---:|" * len(cols))
    cells = [
        ("no skill", 120, 0.0, 0.0, 0.0),
        ("no skill", 250, 0.0, 0.0, 0.0),
        ("no skill", 250, 0.2, 0.0, 0.0),
        ("no skill", 500, 0.2, 0.0, 0.0),
        ("no skill, bench phi 0.2", 250, 0.2, 0.0, 0.2),
        ("edge SR 0.10", 250, 0.2, 0.10, 0.0),
        ("edge SR 0.20", 250, 0.2, 0.20, 0.0),
        ("edge SR 0.20", 500, 0.2, 0.20, 0.0),
    ]
    for case, n, phi, sr, bphi in cells:
        got = series_cell(rng, reps, n, phi, sr, bphi)
        print(f"| {case} | {n} | {phi:g} | " + " | ".join(pct(got[c]) for c in cols) + " |")
    print(
        f"\nUniverses through signals.signals.report_from_rows, {universes} per row (30 tickers, market factor).\n"
    )
    ucols = ["P(SR > bench)", "old vs bench", "PSR vs 0", "DSR (1 trial)"]
    print("| case | T | book | " + " | ".join(ucols) + " |")
    print("|---|---:|---|" + "---:|" * len(ucols))
    for case, edge in (("no skill", 0.0), ("edge 0.1 x realised", 0.1)):
        got = universe_cell(rng, universes, 250, 30, edge)
        for book in ("long_short", "long_only"):
            print(f"| {case} | 250 | {book} | " + " | ".join(pct(got[(book, c)]) for c in ucols) + " |")
    print(f"\n{time.perf_counter() - t0:.0f} s on {describe_cpu()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
