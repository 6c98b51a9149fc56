"""Benchmark: the universe verdict's false rate with no difference, and its power on planted edges.

    .venv/bin/python benchmarks/universe_null.py            # 1,000 universes per case
    .venv/bin/python benchmarks/universe_null.py --quick    # a smoke run (seconds)

Each universe is `gate.sim.universe_rows`: the day's market moves 80 % of the tickers together, the
challenger makes one call per day for every ticker (its rows of one day are one draw), the champion is a
coin per row. Each is judged by `gate.universe.clustered` (the verdict's own figures: the difference in
next-day accuracy, its standard error clustered by evening) and, beside it, by the exact McNemar test that
counts every (ticker, evening) as independent. Seeds are fixed. It prints a Markdown table and the CPU.
"""

from __future__ import annotations

import argparse
import platform
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
from scipy.stats import binomtest  # noqa: E402

from ldtm_core.accountability.gate.sim import universe_rows  # noqa: E402
from ldtm_core.accountability.gate.universe import clustered  # noqa: E402

LEVEL = 0.05


def cpu() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines() if Path("/proc/cpuinfo").exists() else []:
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown CPU"


def case(reps: int, evenings: int, tickers: int, edge: float, seed: int) -> tuple[float, float, float]:
    """(share claimed by the clustered verdict, share claimed counting rows as independent, median
    detectable difference) over `reps` universes."""
    rng = np.random.default_rng(seed)
    clustered_claims, row_claims, detectable = 0, 0, []
    for _ in range(reps):
        a, b, evening = universe_rows(rng, evenings, tickers, edge)
        f = clustered(a, b, evening, LEVEL)
        clustered_claims += f.p_value <= LEVEL
        detectable.append(f.detectable)
        only_a, only_b = int((a & ~b).sum()), int((b & ~a).sum())
        row_claims += binomtest(only_a, only_a + only_b, 0.5, alternative="greater").pvalue <= LEVEL
    return clustered_claims / reps, row_claims / reps, float(np.median(detectable))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=1000)
    parser.add_argument("--tickers", type=int, default=103)
    parser.add_argument("--quick", action="store_true", help="50 universes per case")
    args = parser.parse_args(argv)
    reps = 50 if args.quick else args.reps
    print(f"universe verdict at level {LEVEL}, {args.tickers} tickers, {reps} universes per case; {cpu()}")
    print()
    print(
        "| evenings | planted edge | claimed, clustered by evening | claimed, rows as independent | detectable (median) |"
    )
    print("|---|---|---|---|---|")
    for evenings in (63, 250):
        for i, edge in enumerate((0.0, 0.02, 0.04, 0.06)):
            c, r, d = case(reps, evenings, args.tickers, edge, seed=evenings * 10 + i)
            print(f"| {evenings} | {edge * 100:.0f} points | {c:.1%} | {r:.1%} | {d * 100:.2f} points |")


if __name__ == "__main__":
    main()
