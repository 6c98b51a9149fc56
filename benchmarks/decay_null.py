"""Benchmark: false decay alarms of unchanged gated models, and the delay on a planted drop, with the promise
shrunk for the gate's selection and without.

    .venv/bin/python benchmarks/decay_null.py            # 20 000 first deployments per case, 4 + 4 years
    .venv/bin/python benchmarks/decay_null.py --quick    # a smoke run (seconds)

Only models whose backtest passed the gate are charted, so the backtest accuracy a chart is promised
overstates them (the winner's curse). Each case judges `--reps` first deployments of a model whose true
next-day accuracy is `--accuracy` (3 folds of 63 rows, calls independent of a 50 % up-rate) through the
gate's own rule (`gate.sim.first_deployment_passes`: `gate.evaluate`, then
`champion_challenger.first_deployment` at the trials ledger's level `spend(alpha, trials)`), and charts each
passer's live record with the decay monitor's own charts (`decay.charts_for`, both charts) against three
promises on the same simulated evenings:

  backtest   the raw pooled backtest accuracy and discordant share (the rule before the shrinkage);
  shrunk     `Promise.promised`: their exact one-sided lower bounds at the level the gate judged at;
  truth      the true accuracy and share (what a perfectly known promise would give: the reference).

The record: `--years` years at the true accuracy (false episodes: WARN stretches, `decay.episodes`, per
ticker-year, against the designed 252 / ARL0), then `--after` years at `--dropped` (the delay from the drop
to the first signal of either chart). Seeds are fixed: the same command gives the same table. It prints a
Markdown table and the CPU.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from ldtm_core.accountability.decay import decay, record, selection  # noqa: E402
from ldtm_core.accountability.gate import sim as gate_sim  # noqa: E402
from ldtm_core.data.calendar import SESSIONS_PER_YEAR  # noqa: E402
from ldtm_core.learning.precision import describe_cpu  # noqa: E402

RULES = ("backtest", "shrunk", "truth")


def promises(passed: list, accuracy: float) -> dict[str, list[record.Promise]]:
    """Per rule, the promise of each passer."""
    shrunk = [record.promise_from("gate", "gate decision", folds, report) for folds, report in passed]

    def truth(p: record.Promise) -> record.Promise:  # the backtest's discordant rate, the true share
        won = round(p.discordant * accuracy)
        return replace(p, accuracy=accuracy, model_only=won, up_only=p.discordant - won, level=None)

    return {
        "backtest": [replace(p, level=None) for p in shrunk],
        "shrunk": shrunk,
        "truth": [truth(p) for p in shrunk],
    }


def chart(promise, hits, up, days, before: int, settings) -> tuple[int, float]:
    """(false episodes before the drop, sessions from the drop to the first signal; inf: none)."""
    signals = [d for c in decay.charts_for(promise, hits, up, days, settings) for d in c.signal_dates]
    false = sum(d < days[before] for d in decay.episodes(days, signals, settings.hold))
    late = [d for d in signals if d >= days[before]]
    return false, (days.index(min(late)) - before if late else math.inf)


def case(args, trials: int, settings) -> list[tuple]:
    passed = gate_sim.first_deployment_passes(
        args.reps, accuracy=args.accuracy, trials=trials, seed=args.seed + trials
    )
    by_rule = promises(passed, args.accuracy)
    before, after = args.years * SESSIONS_PER_YEAR, args.after * SESSIONS_PER_YEAR
    days = [d.date() for d in pd.bdate_range("2030-01-01", periods=before + after)]
    rate = np.where(np.arange(before + after) < before, args.accuracy, args.dropped)
    rng = np.random.default_rng(args.seed)
    records = [(rng.random(len(days)) < rate, rng.random(len(days)) < 0.5) for _ in passed]
    rows = []
    for rule in RULES:
        false, delays = 0, []
        for promise, (hits, up) in zip(by_rule[rule], records, strict=True):
            f, d = chart(promise, hits, up, days, before, settings)
            false += f
            delays.append(d)
        years = len(passed) * args.years
        delays = np.array(delays)
        caught = np.isfinite(delays)
        rows.append(
            (
                trials,
                rule,
                len(passed),
                np.mean([p.promised for p in by_rule[rule]]) if passed else math.nan,
                np.mean([p.promised_vs_up for p in by_rule[rule]]) if passed else math.nan,
                false / years if years else math.nan,
                2 * math.sqrt(max(false, 1)) / years if years else math.nan,
                np.percentile(delays, 50, method="higher") if passed else math.nan,
                np.percentile(delays, 90, method="higher") if passed else math.nan,
                caught.mean() if passed else math.nan,
            )
        )
    return rows


def selection_bias(args, trials: int) -> tuple:
    """(passers, mean raw backtest, mean chart floor, mean expected after selection) of the models the
    gate's rule passed, the prior fitted to every judged backtest, passed or not (`decay.selection`)."""
    judged = gate_sim.first_deployment_judgements(
        args.reps, accuracy=args.accuracy, trials=trials, seed=args.seed + trials
    )
    every = [record.promise_from("b", "gate decision", folds, report) for folds, report, _ in judged]
    prior = selection.fit_prior([p.hits for p in every], [p.n for p in every])
    passed = [
        record.promise_from("b", "gate decision", folds, report, prior) for folds, report, ok in judged if ok
    ]
    mean = lambda xs: float(np.mean(xs)) if xs else math.nan  # noqa: E731
    return (
        len(passed),
        mean([p.accuracy for p in passed]),
        mean([p.promised for p in passed]),
        mean([p.expected for p in passed]),
    )


def fmt_delay(x: float, horizon: int) -> str:
    return f"> {horizon}" if not math.isfinite(x) else f"{x:.0f}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=20_000, help="first deployments judged per case")
    ap.add_argument("--accuracy", type=float, default=0.55, help="the models' true next-day accuracy")
    ap.add_argument("--dropped", type=float, default=0.50, help="their accuracy after the planted drop")
    ap.add_argument("--years", type=int, default=4, help="years of unchanged record (false episodes)")
    ap.add_argument("--after", type=int, default=4, help="years after the drop (detection delay)")
    ap.add_argument("--trials", default="1,3", help="the trials ledger's count at the judgement, per case")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="1000 first deployments, 1 + 1 years, trials 1")
    args = ap.parse_args(argv)
    if args.quick:
        args.reps, args.years, args.after, args.trials = 1000, 1, 1, "1"
    settings = decay.DecaySettings()
    t0 = time.perf_counter()
    print("# Decay: false alarms of unchanged gated models, promise shrunk for selection or not\n")
    print(
        f"True accuracy {args.accuracy:.0%}, first deployments judged by the gate's own rule ({args.reps} per "
        f"case, 3 folds x 63 rows); each passer's record: {args.years} years unchanged, then {args.after} at "
        f"{args.dropped:.0%}. Charts: `decay.charts_for` (both), delta {settings.delta * 100:g} points, "
        f"ARL0 {settings.arl0:g} sessions per ticker: designed false alarms "
        f"{SESSIONS_PER_YEAR / settings.arl0:.3f} per ticker-year.\n"
    )
    cols = [
        "trials",
        "promise",
        "passers",
        "mean promised accuracy",
        "mean promised share vs up",
        "false episodes / ticker-year (± 2 se)",
        "delay median (sessions)",
        "delay p90",
        f"caught within {args.after} y",
    ]
    print("| " + " | ".join(cols) + " |")
    print("|---:|---|---:|" + "---:|" * 6)
    horizon = args.after * SESSIONS_PER_YEAR
    for trials in (int(t) for t in args.trials.split(",")):
        for t, rule, n, acc, share, false, se, med, p90, caught in case(args, trials, settings):
            print(
                f"| {t} | {rule} | {n} | {acc * 100:.1f} % | {share * 100:.1f} % | {false:.3f} ± {se:.3f} | "
                f"{fmt_delay(med, horizon)} | {fmt_delay(p90, horizon)} | {caught * 100:.0f} % |"
            )
    print(
        f"\nWhat to expect after selection (true accuracy {args.accuracy:.0%}): the passers' mean figures, "
        "points from the truth in brackets\n"
    )
    print("| trials | passers | raw backtest | chart floor (lower bound) | expected (empirical Bayes) |")
    print("|---:|---:|---:|---:|---:|")
    for trials in (int(t) for t in args.trials.split(",")):
        n, raw, floor, expected = selection_bias(args, trials)
        cells = [f"{x * 100:.1f} % ({(x - args.accuracy) * 100:+.1f})" for x in (raw, floor, expected)]
        print(f"| {trials} | {n} | " + " | ".join(cells) + " |")
    print(f"\n{time.perf_counter() - t0:.0f} s on {describe_cpu()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
