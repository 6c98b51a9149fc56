"""The exact binomial power of the shadow's direction test, and the check of a stated design.

Pure math, in the base because `config.Settings.from_env` refuses a shadow too short for the power it
states (`check_design`); `accountability/shadow/design.py` builds the stored design on it.

The shadow's direction test is the exact one-sided McNemar test: only evenings where exactly one of
champion and shadow was right (discordant) carry evidence, and with equal models each is a fair coin.
For n paired evenings the test's exact power against a stated difference is

    power(n) = sum_d P(D = d) * P(X >= c_d | d, q),    D ~ Binomial(n, r),  X ~ Binomial(d, q)

with r the chance that an evening is discordant, q the chance that a discordant evening went the
champion's way, and c_d the smallest count whose one-sided exact p (Binomial(d, 1/2)) is <= alpha: no
normal approximation, the same test `shadow.compare` runs (`paired.mcnemar_p`).

The stated difference ("margin", in points) means: a champion right on
(50 + m/2) % of evenings and a shadow right on (50 - m/2) %, each evening's two hits independent. Then
r = pc (1 - ps) + ps (1 - pc) and q = pc (1 - ps) / r: 55/45 is m = 10 (r 0.505, q 0.599), 60/40 is
m = 20 (r 0.52, q 0.692). Two models that agree more often than independent ones (the usual case for
two fits of one recipe) have fewer discordant evenings, but the same accuracy gap then makes them more
one-sided, and the paired test has more power for the same n (`exact_power(..., discordant=r)` gives
it): the independent case is the conservative one the design is stated for.

The shadow decides on two tests (direction and next-day |error|), each at alpha / 2 (Bonferroni), so
equal models are retired at most alpha of the time; the power stated here is the direction test's at
alpha / 2, a lower bound on the chance a worse shadow is retired (the error test can only add to it).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
from scipy.stats import binom

ALPHA = 0.05  # the shadow's family-wise false-retire rate for equal models (both tests together)
TESTS = 2  # direction (McNemar) and next-day |error| (Diebold-Mariano), Bonferroni-split
MAX_SESSIONS = 10_000


def rates(champion_accuracy: float, shadow_accuracy: float) -> tuple[float, float]:
    """(r, q) for independent hits: P(an evening is discordant), P(a discordant one is the champion's)."""
    pc, ps = float(champion_accuracy), float(shadow_accuracy)
    if not (0.0 <= pc <= 1.0 and 0.0 <= ps <= 1.0):
        raise ValueError(f"accuracies must lie in [0, 1], not {pc}, {ps}")
    r = pc * (1 - ps) + ps * (1 - pc)
    return r, (pc * (1 - ps) / r if r > 0 else 0.5)


@lru_cache(maxsize=256)
def _critical(n: int, alpha: float) -> np.ndarray:
    """c_d for d = 0..n: the smallest x with P(Binomial(d, 1/2) >= x) <= alpha (d + 1: never)."""
    d = np.arange(n + 1)
    c = binom.isf(alpha, d, 0.5).astype(np.int64) + 1  # P(X > isf) <= alpha, so X >= isf + 1
    # guard the float edge both ways against the exact tail
    tol = alpha * (1 + 1e-12)
    lower = binom.sf(c - 2, d, 0.5) <= tol
    c = np.where(lower & (c - 1 >= 0), c - 1, c)
    higher = binom.sf(c - 1, d, 0.5) > tol
    return np.minimum(np.where(higher, c + 1, c), d + 1)


def exact_power(
    n: int,
    champion_accuracy: float,
    shadow_accuracy: float,
    alpha: float = ALPHA / TESTS,
    discordant: float | None = None,
) -> float:
    """P(the one-sided exact McNemar test at `alpha` calls the champion better) after n paired evenings
    at the two accuracies (equal accuracies: the test's exact size). Hits independent, unless
    `discordant` gives the share of evenings the two disagree on (correlated models: fewer), then the
    champion wins q = (r + pc - ps) / 2r of those."""
    n = int(n)
    if n <= 0:
        return 0.0
    r, q = rates(champion_accuracy, shadow_accuracy)
    if discordant is not None:
        r = float(discordant)
        q = (r + champion_accuracy - shadow_accuracy) / (2 * r) if r > 0 else 0.5
        if not (0 <= r <= 1 and 0 <= q <= 1):
            raise ValueError(
                f"a discordant share {r} cannot give accuracies {champion_accuracy} and {shadow_accuracy}"
            )
    d = np.arange(n + 1)
    c = _critical(n, float(alpha))
    reject = binom.sf(c - 1, d, q)  # P(X >= c_d | d)
    return float(np.sum(binom.pmf(d, n, r) * reject))


def margin_accuracies(margin_points: float) -> tuple[float, float]:
    """(champion, shadow) accuracy for a drop of `margin_points` centred on 50 %."""
    m = float(margin_points) / 100
    return 0.5 + m / 2, 0.5 - m / 2


def power_for_margin(n: int, margin_points: float, alpha: float = ALPHA / TESTS) -> float:
    return exact_power(n, *margin_accuracies(margin_points), alpha=alpha)


def sessions_for_power(margin_points: float, power: float, alpha: float = ALPHA / TESTS) -> int | None:
    """The fewest evenings whose exact power at `margin_points` reaches `power` (None: not within
    MAX_SESSIONS). Exact power is not monotone in n (the binomial's lattice), so this is the first n
    that reaches it; `check_design` accepts any n whose own power reaches it."""
    lo, hi = 1, 8
    while power_for_margin(hi, margin_points, alpha) < power:
        lo, hi = hi, hi * 2
        if hi > MAX_SESSIONS:
            return None
    # a coarse bisection to the neighbourhood, then a short linear scan for the first n reaching it
    while hi - lo > 8:
        mid = (lo + hi) // 2
        if power_for_margin(mid, margin_points, alpha) >= power:
            hi = mid
        else:
            lo = mid
    for n in range(max(lo - 8, 1), hi + 1):
        if power_for_margin(n, margin_points, alpha) >= power:
            return n
    return hi


def check_design(sessions: int, margin_points: float, power: float, alpha: float = ALPHA) -> str | None:
    """None when `sessions` evenings reach `power` at `margin_points`; else the reason they do not."""
    if sessions <= 0:
        return None
    reached = power_for_margin(sessions, margin_points, alpha / TESTS)
    if reached >= power:
        return None
    need = sessions_for_power(margin_points, power, alpha / TESTS)
    chance = 0.5**sessions
    floor = (
        f"; with {sessions} evenings the smallest one-sided exact p is {chance:.3g}"
        if chance > alpha / TESTS
        else ""
    )
    return (
        f"{sessions} shadow evenings detect a {margin_points:g}-point drop ({50 + margin_points / 2:g} % vs "
        f"{50 - margin_points / 2:g} %) with probability {reached:.2f}, below the stated power {power:g}"
        f"{floor}; {'it needs at least ' + str(need) + ' evenings' if need else 'no shadow length reaches it'}"
        " (or state a larger LDTM_SHADOW_MARGIN / a lower LDTM_SHADOW_POWER; 0 promotes at once)"
    )
