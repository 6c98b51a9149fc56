"""Benchmark: early-stopping rules compared offline on recorded validation-loss curves (issue 31).

    .venv/bin/python -u benchmarks/recipe.py --tickers 103 --folds 0 --patience 3,4,5,6,7 --fresh \
        --variant b32=profile:reference_b32,malloc:0,amp:bf16 --variant b128=patience:8,amp:bf16 \
        --json /tmp/curves.json
    .venv/bin/python benchmarks/stopping.py /tmp/curves.json --baseline b32 --recipe b128

A rule is (patience p, relative min_delta d): an epoch counts as progress only when its validation
loss beats the best so far by more than d (relative); the fit stops after p epochs without progress
and keeps the best weights seen, small improvements included. With d = 0 it is the trainer's own rule.
Any rule with p <= the recorded run's patience stops no later than that run, so its stop epoch and
loss are read off the recorded curve exactly (the prefix argument of recipe.py). Wall time is the
recorded run's, prorated by epochs.

The rules are ranked on the even-numbered tickers and the best one that is at least `--speed` times
as fast as the baseline is then scored on the odd-numbered ones, so the reported cost is not the
one the choice was made on.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import statistics
from pathlib import Path

from scipy import stats

PATIENCES = (3, 4, 5, 6, 7, 8)
MIN_DELTAS = (0.0, 0.0005, 0.001, 0.002, 0.005)


def stop(curve: list[float], patience: int, min_delta: float) -> tuple[int, float]:
    """(epochs run, best validation loss) of the rule on one recorded curve."""
    best, stale = math.inf, 0
    for epoch, loss in enumerate(curve, start=1):
        stale = 0 if loss < best * (1 - min_delta) else stale + 1
        best = min(best, loss)
        if stale >= patience:
            return epoch, best
    return len(curve), best


def _own_patience(variant: dict) -> str:
    """The key of the variant's own (longest) patience: the run that was measured."""
    return max(variant, key=int)


def _own_run(variant: dict) -> dict:
    return variant[_own_patience(variant)]


def score(results: list[dict], baseline: str, recipe: str, patience: int, min_delta: float) -> dict:
    base_wall, wall, ratios = 0.0, 0.0, []
    for r in results:
        base = _own_run(r["variants"][baseline])
        run = _own_run(r["variants"][recipe])
        epochs, loss = stop(run["curve"], patience, min_delta)
        base_wall += base["wall_s"]
        wall += run["wall_s"] * epochs / run["epochs"]
        ratios.append(loss / base["candidate"][2])
    log_ratios = [math.log(x) for x in ratios]
    worse = sum(x > 1 for x in ratios)
    return {
        "rule": (patience, min_delta),
        "speed": base_wall / wall,
        "delta": statistics.mean(ratios) - 1,
        "median": statistics.median(ratios) - 1,
        "worse": worse,
        "n": len(ratios),
        "sign_p": stats.binomtest(worse, len(ratios)).pvalue,
        "wilcoxon_p": stats.wilcoxon(log_ratios).pvalue if any(log_ratios) else 1.0,
    }


def line(s: dict) -> str:
    p, d = s["rule"]
    return (
        f"| {p} | {d:g} | {s['speed']:.2f}x | {100 * s['delta']:+.2f} % | {100 * s['median']:+.2f} % "
        f"| {s['worse']}/{s['n']} | {s['sign_p']:.2g} | {s['wilcoxon_p']:.2g} |"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("curves", type=Path, help="recipe.py --json output")
    ap.add_argument(
        "--baseline", required=True, help="the variant every rule is compared with (its own patience)"
    )
    ap.add_argument("--recipe", required=True, help="the variant whose recorded curves the rules stop")
    ap.add_argument("--speed", type=float, default=1.75, help="the rule chosen must be at least this fast")
    args = ap.parse_args()
    data = json.loads(args.curves.read_text())
    results = data["results"]
    longest = min(int(_own_patience(r["variants"][args.recipe])) for r in results)
    rules = [(p, d) for p, d in itertools.product(PATIENCES, MIN_DELTAS) if p <= longest]
    print(f"CPU: {data['cpu']}; {len(results)} tickers; recorded patience of {args.recipe}: {longest}")
    header = "| patience | min_delta | speed | Δ val loss (mean) | median | worse on | sign p | Wilcoxon p |"
    rule_line = "|---|---|---|---|---|---|---|---|"
    halves = {"even (choose)": results[::2], "odd (confirm)": results[1::2], "all": results}
    table = {
        name: [score(rs, args.baseline, args.recipe, *rule) for rule in rules] for name, rs in halves.items()
    }
    print(f"\nall {len(results)} tickers, every rule vs {args.baseline} at its own patience:")
    print(header + "\n" + rule_line)
    for s in table["all"]:
        print(line(s))
    fast = [s for s in table["even (choose)"] if s["speed"] >= args.speed]
    if not fast:
        print(f"\nno rule reaches {args.speed}x on the even tickers")
        return
    chosen = min(fast, key=lambda s: s["delta"])["rule"]
    print(
        f"\nchosen on the even tickers (least Δ val loss at >= {args.speed}x): patience {chosen[0]}, min_delta {chosen[1]:g}"
    )
    print(header + "\n" + rule_line)
    for name in ("even (choose)", "odd (confirm)"):
        s = next(s for s in table[name] if s["rule"] == chosen)
        print(line(s).replace("| ", f"| {name}: ", 1))


if __name__ == "__main__":
    main()
