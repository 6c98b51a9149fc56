"""Benchmark: what one board baseline costs the leaderboard, side by side on one store.

    .venv/bin/python benchmarks/scale.py --tickers 103 --years 10 --no-dagster --full-audit-max-rows 0 --keep
    .venv/bin/python benchmarks/board_baselines.py --url postgresql+psycopg2://postgres@127.0.0.1:5432/ldtm_scale_103_<pid>

`leaderboard` is timed `--runs` times with the registry as it is and with `--baseline` (default: the
trailing majority, `trend`) taken off the board, alternating, after one warm-up read; it prints the
medians, their ratio and the CPU. Drop the kept database afterwards (`DROP DATABASE ...`).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ldtm_core.accountability.board.leaderboard import leaderboard  # noqa: E402
from ldtm_core.db import get_engine  # noqa: E402
from ldtm_core.learning.precision import describe_cpu  # noqa: E402
from ldtm_core.scoring import baselines  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--url", required=True, help="a store with rows (e.g. one kept by scale.py --keep)")
    ap.add_argument("--baseline", default="trend", help="the board baseline to take off (default: trend)")
    ap.add_argument("--runs", type=int, default=4)
    args = ap.parse_args(argv)
    on = baselines.REGISTRY
    if args.baseline not in {b.name for b in on if b.on_board}:
        ap.error(f"--baseline {args.baseline!r} is not a board baseline")
    off = tuple(dataclasses.replace(b, on_board=False) if b.name == args.baseline else b for b in on)
    engine = get_engine(args.url)
    leaderboard(engine)  # warm: connections, caches, the database's pages
    times: dict[str, list[float]] = {"as registered": [], f"without {args.baseline}": []}
    try:
        for _ in range(args.runs):
            for name, registry in zip(times, (on, off), strict=True):
                baselines.REGISTRY = registry
                t0 = time.perf_counter()
                leaderboard(engine)
                times[name].append(time.perf_counter() - t0)
    finally:
        baselines.REGISTRY = on
    medians = {k: sorted(v)[len(v) // 2] for k, v in times.items()}
    print(f"CPU: {describe_cpu()}\n\n| board | runs (s) | median |\n|---|---|---|")
    for name, runs in times.items():
        print(f"| {name} | {', '.join(f'{t:.2f}' for t in runs)} | {medians[name]:.2f} s |")
    with_it, without = medians.values()
    print(f"\nratio: {with_it / without:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
