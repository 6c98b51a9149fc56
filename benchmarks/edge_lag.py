"""Benchmark: what the signal report's execution lag costs a planted edge, by how long the edge lasts.

    .venv/bin/python benchmarks/edge_lag.py            # 50 tickers x 750 evenings, 5 seeds
    .venv/bin/python benchmarks/edge_lag.py --quick    # a smoke run (seconds): 50 x 500, 1 seed

A synthetic universe per seed. Each ticker's log move from session t's close to t+1's is an overnight
gap (GAP_SHARE of the shock's variance: open[t+1] = close[t] x exp(gap[t])) plus the session's own
move: a slow per-name drift (AR(1), phi PHI) and the rest of the shock; the shock is a market factor
plus the name's own move. Evening T's next-day prediction (return units, sd 1 to 2 %, against the
default 0.25 % neutral band) is, per case:
  no skill     noise, independent of the future;
  close only   a little of the name's own shock of T -> T+1 (gap and session), nothing after;
  persistent   the close-only prediction plus the drift of T -> T+1, which carries into T+1 -> T+2.
Each case and rule goes through the report's own functions: `execution.with_held` and
`execution.benchmark`, then `report_from_rows` at the report's default cost (5 bp). Figures over the
seeds: the long/short book's annual Sharpe gross and net (mean +- sd), its mean daily turnover, the
mean IC against the return the book held, and the forecast-time next-day IC. It prints a Markdown
table and the CPU (`lscpu` model name).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from ldtm_core.accountability.signals import execution  # noqa: E402
from ldtm_core.accountability.signals.execution import Bars, with_held  # noqa: E402
from ldtm_core.accountability.signals.portfolios import LABELS  # noqa: E402
from ldtm_core.accountability.signals.rows import Rows, with_returns  # noqa: E402
from ldtm_core.accountability.signals.signals import DEFAULT_COST_BP, report_from_rows  # noqa: E402
from ldtm_core.accountability.signals.stats import Trials  # noqa: E402
from ldtm_core.config import SETTINGS  # noqa: E402
from ldtm_core.horizons import NAMES  # noqa: E402
from ldtm_core.learning.precision import describe_cpu  # noqa: E402

BAND = SETTINGS["LDTM_NEUTRAL_BAND_PCT"].default / 100  # the published direction's neutral band
MARKET, IDIO = 0.01, 0.02  # daily sd of the market factor and of a name's own shock
GAP_SHARE = 0.3  # share of the shock's variance that happens overnight, before the next open
PHI, DRIFT = 0.98, 0.0008  # the slow drift: AR(1) coefficient and daily sd
EDGE = 0.05  # correlation of the close-only prediction with the name's own T -> T+1 shock
PRED = 0.01  # sd of a prediction (return units)
SLOW = 2.0  # weight of the drift in the persistent prediction, against 1 for the close-only part
CASES = ("no skill", "close only", "persistent")
RULES = ("same_close", "next_close", "next_open")


def market(rng, evenings: int, n: int) -> dict:
    """Closes and opens over evenings + 2 sessions, and the pieces the predictions may know."""
    t = evenings + 2  # the last evening's next_close/next_open exit is session evenings + 1
    g, d = np.sqrt(GAP_SHARE), np.sqrt(1 - GAP_SHARE)
    own_gap, own_day = rng.normal(0, IDIO * g, (t, n)), rng.normal(0, IDIO * d, (t, n))
    gap = own_gap + rng.normal(0, MARKET * g, (t, 1))
    drift = np.zeros((t, n))
    drift[0] = rng.normal(0, DRIFT, n)
    for k in range(1, t):  # stationary AR(1): each name's expected return wanders slowly
        drift[k] = PHI * drift[k - 1] + rng.normal(0, DRIFT * np.sqrt(1 - PHI * PHI), n)
    day = drift + own_day + rng.normal(0, MARKET * d, (t, 1))
    log_close = np.vstack([np.zeros((1, n)), np.cumsum(gap + day, axis=0)])[:t] + np.log(50.0)
    log_open = np.vstack([log_close[:1], log_close[:-1] + gap[: t - 1]])  # open[t+1] = close[t] x gap[t]
    return {"close": np.exp(log_close), "open": np.exp(log_open), "shock": own_gap + own_day, "drift": drift}


def predictions(rng, m: dict, evenings: int) -> dict:
    """Evenings x tickers next-day predictions per case."""
    n = m["close"].shape[1]
    noise = rng.standard_normal((evenings, n))
    own = m["shock"][:evenings] / IDIO  # the standardised T -> T+1 shock of each name
    close_only = PRED * (EDGE * own + np.sqrt(1 - EDGE * EDGE) * noise)
    return {
        "no skill": PRED * rng.standard_normal((evenings, n)),
        "close only": close_only,
        "persistent": close_only + SLOW * PRED * m["drift"][:evenings] / DRIFT,
    }


def names(n: int) -> list[str]:
    return [f"T{k:03d}" for k in range(n)]


def rows_frame(close: np.ndarray, pred: np.ndarray, sessions: pd.DatetimeIndex) -> pd.DataFrame:
    """The rows frame of evenings x tickers predictions; actuals are the next close, as fillback writes."""
    evenings, n = pred.shape
    e, i = np.repeat(np.arange(evenings), n), np.tile(np.arange(n), evenings)
    p = pred[e, i]
    frame = pd.DataFrame(
        {"ticker": np.array(names(n))[i], "run_date": sessions[e], "in_sample": False,
         "model_status": "active", "run_date_close": close[e, i],
         "direction_pred": np.where(p > BAND, "bullish", np.where(p < -BAND, "bearish", "neutral"))}
    )  # fmt: skip
    for h in NAMES:  # every horizon on the next session (the table reads next_day only)
        frame[f"{h}_date"] = sessions[e + 1]
        frame[f"{h}_pred"] = close[e, i] * (1 + p)
        frame[f"{h}_actual"] = close[e + 1, i]
    return with_returns(frame)


def figures(frame: pd.DataFrame, bars: Bars, rule: str) -> dict:
    """The report's figures for one case under one rule."""
    held = with_held(frame, rule, bars)
    days = execution.scored_evenings(held)
    if rule == execution.SAME_CLOSE:  # the equal-weight universe from each evening's own close
        bench = held.groupby(held["run_date"].dt.date)["held_return"].mean().reindex(days)
    else:
        bench = execution.benchmark(bars, rule, days)
    rows = Rows(held, sorted(frame["ticker"].unique()), 0, 0, 0, pd.DataFrame())
    report = report_from_rows(rows, bench, DEFAULT_COST_BP, Trials(1, "benchmark"), execution=rule)
    s = report.summary().set_index(["portfolio", "basis"])
    ic = report.ic.set_index("horizon")["mean_ic"]
    return {
        "gross": s.loc[(LABELS["long_short"], "gross"), "sharpe"],
        "net": s.loc[(LABELS["long_short"], "net"), "sharpe"],
        "turnover": s.loc[(LABELS["long_short"], "net"), "turnover"],
        "held IC": ic[execution.held_label(rule)],
        "forecast IC": ic["next_day"],
    }


def run_seed(seed: int, evenings: int, n: int) -> dict:
    rng = np.random.default_rng(seed)
    m = market(rng, evenings, n)
    sessions = pd.bdate_range("2021-01-04", periods=evenings + 2)
    bars = Bars(pd.DataFrame(m["open"], sessions, names(n)), pd.DataFrame(m["close"], sessions, names(n)))
    out = {}
    for case, pred in predictions(rng, m, evenings).items():
        frame = rows_frame(m["close"], pred, sessions)
        for rule in RULES:
            out[(case, rule)] = figures(frame, bars, rule)
    return out


def pm(values: list[float]) -> str:
    """mean ± sd over the seeds (the mean alone for one seed)."""
    sd = f" ± {np.std(values, ddof=1):.2f}" if len(values) > 1 else ""
    return f"{np.mean(values):+.2f}{sd}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--tickers", type=int, default=50)
    ap.add_argument("--evenings", type=int, default=750)
    ap.add_argument("--quick", action="store_true", help="a smoke run: 1 seed, 50 tickers x 500 evenings")
    args = ap.parse_args()
    seeds, n, evenings = (1, 50, 500) if args.quick else (args.seeds, args.tickers, args.evenings)
    t0 = time.perf_counter()
    runs = [run_seed(seed, evenings, n) for seed in range(seeds)]
    print(
        f"# What the execution lag costs a planted edge: {n} tickers x {evenings} evenings, seeds 0-{seeds - 1}\n"
    )
    print(
        f"Long/short book, annual Sharpe (mean ± sd over seeds) gross and net of {DEFAULT_COST_BP:g} bp per unit "
        f"of turnover; overnight gap {GAP_SHARE:.0%} of the shock's variance; close-only edge {EDGE}.\n"
    )
    print("| case | rule | Sharpe gross | Sharpe net | turnover | held IC | forecast IC |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for case in CASES:
        for rule in RULES:
            got = [r[(case, rule)] for r in runs]
            mean = {k: np.mean([g[k] for g in got]) for k in ("turnover", "held IC", "forecast IC")}
            print(
                f"| {case} | {execution.tag(rule)} | {pm([g['gross'] for g in got])} | "
                f"{pm([g['net'] for g in got])} | {mean['turnover']:.2f} | {mean['held IC']:+.3f} | "
                f"{mean['forecast IC']:+.3f} |"
            )
    print(f"\n{time.perf_counter() - t0:.0f} s on {describe_cpu()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
