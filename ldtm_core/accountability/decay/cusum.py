"""A Bernoulli CUSUM for a drop in a hit rate (decay alerts), with its threshold designed from
an exact Markov-chain average run length.

Each session gives one Bernoulli outcome: a hit (the model's next-day direction was right) or a miss.
In control the hit rate is p0 (what the gate report promised); out of control it is p1 = p0 - delta.
The log-likelihood-ratio CUSUM (Page 1954; Reynolds & Stoumbos 1999 for the Bernoulli case) is

    S_0 = 0,  S_t = max(0, S_{t-1} + y_t - k),  y_t = 1 on a miss, 0 on a hit,

in units of ln(q1 (1 - q0) / (q0 (1 - q1))) with q = 1 - p, and reference value
k = ln((1 - q0) / (1 - q1)) / ln(q1 (1 - q0) / (q0 (1 - q1))), which lies between q0 and q1. It signals
when S_t >= h, and then restarts at 0 (so signals recur at the designed rate, never in clusters).

Why a Markov chain and not a simulation: with k rounded to a fraction a/b (denominator <= MAX_DENOMINATOR),
b * S_t is an integer in 0..b*h, so the chart IS a finite Markov chain and its in-control average run
length (ARL0, sessions to a false alarm) is the exact solution of (I - Q) L = 1 (Brook & Evans 1972). The
chart runs with that same rounded k, so the design is exact for what runs, not an approximation of it.
`design` searches the smallest h on the 1/b grid whose ARL0 reaches the target: reproducible, no seed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache

import numpy as np
from scipy.sparse import identity, lil_matrix
from scipy.sparse.linalg import spsolve

MAX_DENOMINATOR = 40  # k on a 1/40 grid: within ~0.0003 of the exact LLR value
MIN_DENOMINATOR = 20  # h on a grid of at least 1/20: the designed ARL0 overshoots its target by ~1 %


@dataclass(frozen=True)
class CusumDesign:
    """One chart: in-control hit rate p0, out-of-control p1, reference k = a/b, threshold h = H/b."""

    p0: float
    p1: float
    a: int  # k = a / b
    b: int
    steps: int  # H: the threshold in units of 1/b
    arl0: float  # the exact in-control ARL of this chart (>= the target it was designed for)

    @property
    def k(self) -> float:
        return self.a / self.b

    @property
    def h(self) -> float:
        return self.steps / self.b


def reference_value(p0: float, p1: float) -> Fraction:
    """k of the LLR CUSUM for hit rate p0 -> p1 < p0, in miss units, as a fraction a/b."""
    if not (0.0 < p1 < p0 < 1.0):
        raise ValueError(f"a decay chart needs 0 < p1 < p0 < 1, not p0={p0}, p1={p1}")
    q0, q1 = 1.0 - p0, 1.0 - p1
    k = math.log((1 - q0) / (1 - q1)) / math.log(q1 * (1 - q0) / (q0 * (1 - q1)))
    return Fraction(k).limit_denominator(MAX_DENOMINATOR)


def average_run_length(a: int, b: int, steps: int, p: float) -> float:
    """Exact ARL from S = 0 of the integer chart s -> max(0, s + b*y - a), alarm at s >= steps, where a
    miss (y = 1) has probability 1 - p. Transient states 0..steps-1; (I - Q) L = 1."""
    q = 1.0 - p
    if steps <= 0:
        return 1.0
    trans = lil_matrix((steps, steps))
    for s in range(steps):
        up = s + b - a
        if up < steps:
            trans[s, up] += q
        trans[s, max(0, s - a)] += p
    run = spsolve((identity(steps, format="csc") - trans.tocsc()), np.ones(steps))
    return float(run[0])


@lru_cache(maxsize=4096)
def _design(p0: float, p1: float, arl0: float) -> CusumDesign:
    frac = reference_value(p0, p1)
    # A fine enough grid for h too (k = 1/2 alone would put h on half-units and overshoot the target).
    m = -(-MIN_DENOMINATOR // frac.denominator)
    a, b = frac.numerator * m, frac.denominator * m
    if a <= 0:
        raise ValueError(f"reference value k={frac} must be positive (p0={p0}, p1={p1})")
    lo, hi = 0, b  # ARL(steps) grows with steps: double hi until it reaches the target, then bisect
    while average_run_length(a, b, hi, p0) < arl0:
        lo, hi = hi, hi * 2
        if hi > 200_000:
            raise ValueError(f"no threshold reaches ARL0={arl0} for p0={p0}, p1={p1}")
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if average_run_length(a, b, mid, p0) >= arl0:
            hi = mid
        else:
            lo = mid
    return CusumDesign(p0, p1, a, b, hi, average_run_length(a, b, hi, p0))


def design(p0: float, p1: float, arl0: float) -> CusumDesign:
    """The chart for p0 -> p1 with the smallest threshold whose in-control ARL is at least `arl0`.
    Inputs are rounded to 4 decimals (cache key): nightly, 103 tickers share a few designs."""
    if arl0 < 1:
        raise ValueError(f"the designed in-control ARL must be >= 1 session, not {arl0}")
    return _design(round(float(p0), 4), round(float(p1), 4), float(arl0))


def run(design: CusumDesign, misses) -> tuple[np.ndarray, list[int]]:
    """The chart over outcomes (1 = miss, 0 = hit) as it runs live: S_t after each (restarted at 0 after
    each signal) and the indices of the signals. Signals at this rate are what ARL0 counts."""
    y = np.asarray(misses, dtype=np.int64)
    s, out, signals = 0, np.empty(len(y), dtype=np.float64), []
    step_up, step_down = design.b - design.a, design.a
    for i, miss in enumerate(y):
        s = s + step_up if miss else max(0, s - step_down)
        if s >= design.steps:
            signals.append(i)
            s = 0
        out[i] = s / design.b
    return out, signals


def alarm_runs(design: CusumDesign, misses: np.ndarray) -> np.ndarray:
    """Vectorised over rows: `misses` [N, T] (1 = miss) -> the number of alarms per row when the chart
    restarts at 0 after each signal (how false alarms are counted against ARL0)."""
    y = np.asarray(misses, dtype=np.int64)
    s = np.zeros(y.shape[0], dtype=np.int64)
    alarms = np.zeros(y.shape[0], dtype=np.int64)
    up, down = design.b - design.a, design.a
    for t in range(y.shape[1]):
        s = np.where(y[:, t] == 1, s + up, np.maximum(0, s - down))
        hit = s >= design.steps
        alarms += hit
        s[hit] = 0
    return alarms


def run_normalised(designs: list[CusumDesign], misses) -> tuple[np.ndarray, list[int]]:
    """The chart when each outcome has its own design (decay: the promise of the model that made the
    row): S_t = max(0, S_{t-1} + step_t), each step in units of its own design's threshold (a miss
    +(b - a) / H, a hit -a / H), a signal at S >= 1, then a restart at 0. With one design throughout it
    is `run` exactly (S / h), so the exact ARL0 holds; when the promise changes, each row still drifts
    down at its own in-control rate and up at its own out-of-control rate (the rate is checked by
    simulation in the tests)."""
    y = np.asarray(misses, dtype=bool)
    if len(designs) != len(y):
        raise ValueError(f"{len(designs)} designs for {len(y)} outcomes")
    s, out, signals = 0.0, np.empty(len(y), dtype=np.float64), []
    for i, (d, miss) in enumerate(zip(designs, y, strict=True)):
        s = s + (d.b - d.a) / d.steps if miss else max(0.0, s - d.a / d.steps)
        if s >= 1.0 - 1e-9:  # float sums of the integer chart's steps: 1e-9 is far below one step
            signals.append(i)
            s = 0.0
        out[i] = s
    return out, signals
