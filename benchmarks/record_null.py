"""Benchmark: the board's labels read every evening for years, in flat, rising, falling and turning markets.

    .venv/bin/python benchmarks/record_null.py            # 200 boards of 103 tickers x 1,260 evenings
    .venv/bin/python benchmarks/record_null.py --quick    # a smoke run (seconds)

Each ticker's model is a coin (no skill) unless planted; each evening's direction follows a common market
move with probability RHO (tickers fall together), else its own draw, at the market's up-rate. Every
evening the board is read: the record's labels (accountability.board.record: e-values from
`evidence.e_value` on the cumulative counts against a coin, always-up, persistence and the trailing-21
majority, the smallest per ticker, e-BH over the tickers) and, for comparison, the window's old rule
(the 30-evening exact sign test vs always-up and persistence, BH over the board's tests, q <= 0.05). Figures: the share of evenings with
any false label, the share of boards ever showing one in the horizon, the record answer's false Yes
(universe e >= 1/alpha), the "beats" labels (e-BH over every ticker-baseline e-value) against a
baseline the coin does not beat on the record so far, and the evenings a lone planted edge needs before
the record labels it.
It prints a Markdown table and the CPU.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
from scipy.stats import binom  # noqa: E402

from ldtm_core.learning.precision import describe_cpu  # noqa: E402
from ldtm_core.scoring import evidence  # noqa: E402
from ldtm_core.scoring.baselines import TREND_SESSIONS  # noqa: E402

RHO = 0.5  # the share of a ticker's moves that are the market's
WINDOW = 21  # evenings in the board's 30 calendar days
ALPHA = evidence.ALPHA
# name: the market's up-rate per evening (a function of the evening's share of the horizon)
MARKETS = {
    "flat": lambda x: 0.50 + 0 * x,
    "rising": lambda x: 0.56 + 0 * x,
    "falling": lambda x: 0.44 + 0 * x,
    "turning 56 to 44": lambda x: np.where(x < 0.5, 0.56, 0.44),
    "turning 50 to 40": lambda x: np.where(x < 0.5, 0.50, 0.40),
}


def directions(rng, tickers: int, evenings: int, up_rate) -> np.ndarray:
    """(evenings, tickers) booleans: the day went up."""
    rate = up_rate(np.arange(evenings) / evenings)[:, None]
    market = rng.random((evenings, 1)) < rate
    own = rng.random((evenings, tickers)) < rate
    return np.where(rng.random((evenings, tickers)) < RHO, market, own)


def trend_right(up: np.ndarray) -> np.ndarray:
    """Per evening: the trailing majority (scoring.baselines.TREND_SESSIONS moves up to the evening, ties
    and none: up) called the next day right."""
    moves = np.vstack([np.zeros((1, up.shape[1])), np.where(up, 1.0, -1.0)])
    c = np.cumsum(moves, 0)  # c[t]: the moves before evening t (up[t - 1] is the move into evening t)
    t = np.arange(up.shape[0])
    total = c[t] - c[np.maximum(t - TREND_SESSIONS, 0)]
    return (total >= 0) == up


def expected_baseline_accuracy(up_rate, evenings: int) -> np.ndarray:
    """(evenings, 3): each board baseline's expected accuracy on each evening, from the market's up-rate
    (always-up: p; persistence: p_t p_(t-1) + (1 - p_t)(1 - p_(t-1)); the trailing majority: the chance
    its last TREND_SESSIONS moves mostly went up times p, plus the opposite)."""
    p = up_rate(np.arange(evenings) / evenings) * np.ones(evenings)
    prev = np.concatenate([[p[0]], p[:-1]])
    trailing = np.array([p[max(t - TREND_SESSIONS, 0) : t].mean() if t else 0.5 for t in range(evenings)])
    majority_up = binom.sf(TREND_SESSIONS // 2, TREND_SESSIONS, trailing)  # > half of them up
    majority_up[0] = 1.0  # no moves yet: up
    return np.stack(
        [p, p * prev + (1 - p) * (1 - prev), majority_up * p + (1 - majority_up) * (1 - p)], axis=1
    )


def false_beats(beats: np.ndarray, up_rate) -> np.ndarray:
    """Per evening: any "beats" label against a baseline a coin-flip model does not beat on the record
    so far (its expected accuracy over the evenings up to then >= 1/2; in a falling market a coin really
    beats always-up, so that label is true). `beats`: (evenings, tickers, 3)."""
    acc = expected_baseline_accuracy(up_rate, beats.shape[0])
    record = np.cumsum(acc, 0) / np.arange(1, beats.shape[0] + 1)[:, None]
    return (beats & (record >= 0.5)[:, None, :]).any(axis=(1, 2))


def record_labels(right: np.ndarray, up: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per evening: (shown, universe_yes, beats) of the record's labels, read on the cumulative counts;
    `beats` (evenings, tickers, 3 baselines): e-BH over every (ticker, board baseline) e-value."""
    persist = np.vstack([np.zeros((1, up.shape[1]), bool), up[1:] == up[:-1]])
    has_prev = np.vstack([np.zeros((1, up.shape[1]), bool), np.ones((up.shape[0] - 1, up.shape[1]), bool)])
    trend = trend_right(up)
    pairs = [
        (right, ~right),  # a coin
        (right & ~up, ~right & up),  # always-up
        (right & ~persist & has_prev, ~right & persist & has_prev),  # persistence
        (right & ~trend, ~right & trend),  # the trailing majority
    ]
    each = [evidence.e_value(np.cumsum(w, 0), np.cumsum(lo, 0)) for w, lo in pairs]
    e = np.min(each, axis=0)
    vs_baselines = np.concatenate(each[1:], axis=1)  # (evenings, baselines x tickers), baseline-major
    found = evidence.e_bh_rows(vs_baselines)
    beats = found.reshape(up.shape[0], len(each) - 1, up.shape[1]).transpose(0, 2, 1)
    return evidence.e_bh_rows(e), e.mean(axis=1) >= 1 / ALPHA, beats


def window_labels(right: np.ndarray, up: np.ndarray) -> np.ndarray:
    """Per evening: the old rule's labels (exact sign tests on the last WINDOW evenings vs always-up and
    persistence, BH over both families together, q <= alpha), any per ticker."""
    persist = np.vstack([np.zeros((1, up.shape[1]), bool), up[1:] == up[:-1]])

    def rolling(x):
        c = np.cumsum(np.vstack([np.zeros((1, x.shape[1])), x]), 0)
        return c[WINDOW:] - c[:-WINDOW]

    ps = []
    for base in (up, persist):
        b, c = rolling(right & ~base), rolling(~right & base)
        ps.append(np.where(b + c > 0, binom.sf(b - 1, b + c, 0.5), 1.0))
    p = np.concatenate(ps, axis=1)
    found = evidence.e_bh_rows(1 / np.maximum(p, 1e-300))  # BH on p is e-BH on 1/p
    half = found.shape[1] // 2
    return found[:, :half] | found[:, half:]


def run(sims: int, tickers: int, evenings: int, seed: int, window: bool) -> list[tuple]:
    rng = np.random.default_rng(seed)
    out = []
    for name, up_rate in MARKETS.items():
        any_evening, ever, yes_evening, yes_ever, old_evening, old_ever = [], [], [], [], [], []
        beats_evening, beats_ever = [], []
        for _ in range(sims):
            up = directions(rng, tickers, evenings, up_rate)
            right = rng.random(up.shape) < 0.5
            shown, yes, beats = record_labels(right, up)
            wrong = false_beats(beats, up_rate)
            beats_evening.append(wrong.mean())
            beats_ever.append(wrong.any())
            any_evening.append(shown.any(1).mean())
            ever.append(shown.any())
            yes_evening.append(yes.mean())
            yes_ever.append(yes.any())
            if window:
                old = window_labels(right, up)
                old_evening.append(old.any(1).mean())
                old_ever.append(old.any())
        out.append(
            (
                name,
                np.mean(any_evening),
                np.mean(ever),
                np.mean(yes_evening),
                np.mean(yes_ever),
                np.mean(old_evening) if window else np.nan,
                np.mean(old_ever) if window else np.nan,
                np.mean(beats_evening),
                np.mean(beats_ever),
            )
        )
    return out


def evenings_to_label(rate: float, sims: int, tickers: int, evenings: int, seed: int) -> tuple[float, float]:
    """(median evenings until a lone planted ticker right `rate` of evenings is shown, share shown within
    the horizon), in a flat market of coins."""
    rng = np.random.default_rng(seed)
    first = []
    for _ in range(sims):
        up = directions(rng, tickers, evenings, MARKETS["flat"])
        p = np.full(tickers, 0.5)
        p[0] = rate
        right = rng.random(up.shape) < p
        shown, _, _ = record_labels(right, up)
        hit = np.flatnonzero(shown[:, 0])
        first.append(hit[0] + 1 if hit.size else np.inf)
    first = np.asarray(first)
    return float(np.median(first)), float(np.isfinite(first).mean())


def pct(x: float) -> str:
    return "–" if np.isnan(x) else f"{x * 100:.1f} %"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sims", type=int, default=200)
    ap.add_argument("--tickers", type=int, default=103)
    ap.add_argument("--evenings", type=int, default=1260, help="5 years of sessions")
    ap.add_argument("--seed", type=int, default=20261128)
    ap.add_argument("--quick", action="store_true", help="20 boards of 30 tickers x 300 evenings")
    args = ap.parse_args(argv)
    if args.quick:
        args.sims, args.tickers, args.evenings = 20, 30, 300
    t0 = time.perf_counter()
    print(f"CPU: {describe_cpu()}; {args.sims} boards of {args.tickers} tickers x {args.evenings} evenings\n")
    print(
        "| market (no model has skill) | any label, per evening | any label ever | record Yes, per evening "
        "| record Yes ever | window rule: any label, per evening | window rule: ever "
        "| false 'beats', per evening | false 'beats' ever |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, *figures in run(args.sims, args.tickers, args.evenings, args.seed, window=True):
        print(f"| {name} | " + " | ".join(pct(f) for f in figures) + " |")
    print(
        "\n| planted lone edge (flat market, right ...) | median evenings to label | labelled within horizon |"
    )
    print("|---|---:|---:|")
    for rate in (0.52, 0.55, 0.60, 0.70):
        median, share = evenings_to_label(
            rate, max(args.sims // 4, 5), args.tickers, args.evenings, args.seed
        )
        shown = "never" if np.isinf(median) else f"{median:,.0f}"
        print(f"| {rate:.0%} | {shown} | {pct(share)} |")
    print(f"\n{time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
