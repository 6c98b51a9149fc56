"""Benchmark: the null gate through a global recipe's whole loop (issue 59).

    .venv/bin/python benchmarks/recipe_null.py                       # ridge 40, lightgbm 20, global_lstm 6 universes
    .venv/bin/python benchmarks/recipe_null.py --recipes ridge --universes 5    # a smoke run

Each universe is 30 tickers of pure random walks (no drift, no skill to find: every recipe's next-day
call is a coin with respect to the future), three years of daily bars, in a fresh SQLite store. Through
the product's own functions: `global_fit.train_global` (one fit on the pool, a candidate per ticker) ->
`backtest_pool.backtest_many` (its quarter folds) -> `universe_decision.decide` (the universe policy: a
first deployment against every baseline, clustered by evening, at the level the trials ledger spends).
A universe counts as a false deployment when the decision promotes the recipe. Over the universes the
rate must stay at or under alpha (0.05); the table gives it with its 95 % Clopper-Pearson upper bound,
the median seconds one loop took and the CPU.
"""

from __future__ import annotations

import argparse
import datetime as dt
import logging
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from scipy.stats import beta  # noqa: E402

from ldtm_core.accountability.gate.backtest_pool import backtest_many  # noqa: E402
from ldtm_core.accountability.gate.policy import GateThresholds  # noqa: E402
from ldtm_core.accountability.gate.universe import BETTER  # noqa: E402
from ldtm_core.accountability.gate.universe_decision import decide  # noqa: E402
from ldtm_core.config import Settings  # noqa: E402
from ldtm_core.data.calendar import session_array  # noqa: E402
from ldtm_core.data.ingest import ingest_frame  # noqa: E402
from ldtm_core.learning.precision import describe_cpu  # noqa: E402
from ldtm_core.learning.recipes import global_fit  # noqa: E402
from ldtm_core.migrate import upgrade  # noqa: E402

TICKERS = [f"RW{i:02d}" for i in range(30)]
START, END = "2021-01-04", "2023-12-29"
DEFAULT_UNIVERSES = {"ridge": 40, "lightgbm": 20, "global_lstm": 6}
OVERRIDES = {"global_lstm": {"epochs": 2}}  # two passes: the loop's cost, not the fit's quality, is measured


def random_walks(seed: int) -> pd.DataFrame:
    """Daily bars of TICKERS: log closes a driftless Gaussian walk (1.5 % a day), opens, highs, lows and
    volumes around them with no information about the next close."""
    rng = np.random.default_rng(seed)
    days = session_array()
    days = days[(days >= np.datetime64(START)) & (days <= np.datetime64(END))]
    frames = []
    for t in TICKERS:
        close = 100 * np.exp(np.cumsum(rng.normal(0, 0.015, len(days))))
        opened = np.r_[close[0], close[:-1]] * np.exp(rng.normal(0, 0.003, len(days)))
        spread = np.abs(rng.normal(0, 0.006, (2, len(days))))
        frames.append(
            pd.DataFrame(
                {
                    "ticker": t,
                    "date": pd.to_datetime(days).date,
                    "open": opened,
                    "high": np.maximum(opened, close) * np.exp(spread[0]),
                    "low": np.minimum(opened, close) * np.exp(-spread[1]),
                    "close": close,
                    "volume": rng.lognormal(13, 0.4, len(days)).round(),
                }
            )
        )
    return pd.concat(frames, ignore_index=True)


def one_loop(recipe: str, seed: int, folds: int) -> tuple[bool, float, str]:
    """(the recipe deployed, seconds, the verdict's summary) on one fresh null universe."""
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{tmp}/ldtm.db"
        engine = upgrade(url)
        ingest_frame(engine, random_walks(seed), "synthetic")
        settings = Settings(home=Path(tmp) / "home", database_url=url, universe=",".join(TICKERS))
        t0 = time.perf_counter()
        global_fit.train_global(
            engine,
            settings,
            recipe,
            TICKERS,
            as_of=dt.date.fromisoformat(END),
            overrides=OVERRIDES.get(recipe),
        )
        backtest_many(settings, TICKERS, folds=folds, max_workers=1, recipe=recipe)
        d = decide(engine, settings, recipe, TICKERS, thresholds=GateThresholds())
        seconds = time.perf_counter() - t0
        engine.dispose()
    verdict = next(iter(d.verdicts.values()))
    return verdict.decision == BETTER, seconds, verdict.summary()


def upper_95(k: int, n: int) -> float:
    return 1.0 if k == n else float(beta.ppf(0.975, k + 1, n - k))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--recipes", default="ridge,lightgbm,global_lstm")
    ap.add_argument("--universes", type=int, default=None, help="per recipe (default: DEFAULT_UNIVERSES)")
    ap.add_argument("--folds", type=int, default=3)
    args = ap.parse_args(argv)
    notify = logging.getLogger("ldtm.notify")
    level = notify.level
    rows = []
    for recipe in args.recipes.split(","):
        n = args.universes or DEFAULT_UNIVERSES.get(recipe, 10)
        notify.setLevel(logging.ERROR)  # each held candidate's notification: 30 per universe
        try:
            results = [one_loop(recipe, 1000 + i, args.folds) for i in range(n)]
        finally:
            notify.setLevel(level)  # a caller's (the smoke test's process) logging stays as it was
        deployed = sum(r[0] for r in results)
        print(f"{recipe}: e.g. {results[0][2]}", file=sys.stderr)
        rows.append(
            f"| {recipe} | {n} | {deployed} | {deployed / n:.1%} | {upper_95(deployed, n):.1%} | "
            f"{statistics.median(r[1] for r in results):.1f} s |"
        )
    print(f"CPU: {describe_cpu()}; 30 random-walk tickers x {START}..{END}, {args.folds} folds, alpha 0.05\n")
    print("| recipe | null universes | deployed | rate | 95 % upper bound | one loop (median) |")
    print("|---|---|---|---|---|---|")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
