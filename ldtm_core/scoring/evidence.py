"""Evidence that stays valid read every evening and grows with the record (anytime-valid).

A fixed-sample test (the board's 30-day exact tests) is valid once: read every evening it errs far more
often than its level, and a 30-day window never accumulates evidence, so a real edge is never shown.
Here each comparison is an e-process: a nonnegative statistic whose expectation stays <= 1 at any
stopping time while the model has no edge, so by Ville's inequality it ever reaches 1/alpha with
probability <= alpha however often it is read, and under a persistent edge it grows without bound.

* **One comparison.** On each scored evening a comparison either gives the model a win or a loss (or
  nothing). Against a coin every evening counts: a win is a right call. Against a baseline that makes a
  call (always-up, persistence, the trailing majority), only the evenings where the two disagree count (the exact sign test's
  rows): a win is the model right and the baseline wrong. No edge means a win has probability <= 1/2
  given the past. The e-value is a mixture of likelihood ratios over a grid of win rates above 1/2,

      E = mean_j (2 theta_j)^wins (2 (1 - theta_j))^losses,   theta_j in GRID,

  a martingale under theta = 1/2 and a supermartingale under any theta <= 1/2 (each factor's mean is
  2(theta theta_j + (1 - theta)(1 - theta_j)) <= 1 when theta_j >= 1/2 >= theta). It depends on the
  counts only, so the whole record's counts give the value on any evening.
* **Beating every comparison** (coin included): the smallest of a row's e-values. If the model is no
  better than any one of them, that one's e-process bounds the minimum, so it is an e-process for the
  union null "no better than at least one": a coin-flip model in a falling market beats always-up, but
  never its coin.
* **Across the universe**: e-BH (Wang & Ramdas 2022) rejects the rows whose e-values clear BH's line on
  1/e, which controls the false-discovery rate at alpha under any dependence between tickers; it is
  `multipletests(1/e, method="fdr_bh")`. Under the complete null the chance a board shows any label is
  <= alpha on every evening. The universe's e-value is the mean of its rows' e-values (a mean of
  e-processes is one): it rejects at >= 1/alpha and gains from many small edges together.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
from scipy.special import logsumexp
from statsmodels.stats.multitest import multipletests

from ldtm_core.scoring.baselines import board_baselines

ALPHA = 0.05
# Win rates the mixture bets on: small edges first (a 52-55 % model is what finance mostly offers).
GRID = (0.52, 0.55, 0.60, 0.65, 0.70, 0.80)
COIN = "coin"  # the comparison every row has: right more often than a fair coin
MAX_EVENINGS = 100_000  # the longest record `evenings_to_show` looks through


def e_value(wins, losses) -> np.ndarray:
    """The mixture e-value of `wins` against `losses` (arrays or scalars; fractional counts allowed for
    expected paths). 1 with no evidence; computed in logs, so long records do not overflow."""
    w = np.asarray(wins, dtype=float)[..., None]
    lo = np.asarray(losses, dtype=float)[..., None]
    theta = np.asarray(GRID)
    log_terms = w * np.log(2 * theta) + lo * np.log(2 * (1 - theta))
    return np.exp(np.minimum(logsumexp(log_terms, axis=-1) - math.log(len(GRID)), 700.0))


def anytime_p(e) -> np.ndarray:
    """min(1, 1/E): a p-value valid at any stopping time (Ville)."""
    e = np.asarray(e, dtype=float)
    with np.errstate(divide="ignore"):
        return np.where(np.isnan(e), np.nan, np.minimum(1.0, 1.0 / e))


def e_bh(e_values, alpha: float = ALPHA) -> np.ndarray:
    """e-BH discoveries of one family (NaN: no test, never a discovery and not counted in it)."""
    p = anytime_p(e_values)
    out = np.zeros(p.shape, dtype=bool)
    ok = ~np.isnan(p)
    if ok.any():
        out[ok] = multipletests(p[ok], alpha=alpha, method="fdr_bh")[0]
    return out


def e_bh_rows(e_matrix, alpha: float = ALPHA) -> np.ndarray:
    """e-BH on each row of an (evenings x tests) matrix at once (no NaN): the same discoveries as `e_bh`
    row by row (tested against it), fast enough to read a simulated board every evening for years."""
    e = np.asarray(e_matrix, dtype=float)
    k = e.shape[-1]
    ranked = -np.sort(-e, axis=-1)  # largest first
    clears = ranked >= k / (alpha * np.arange(1, k + 1))
    # The largest rank that clears its line (0: none); every e at or above that line is a discovery.
    last = np.where(clears.any(axis=-1), k - np.argmax(clears[..., ::-1], axis=-1), 0)
    line = np.where(last > 0, k / (alpha * np.maximum(last, 1)), np.inf)
    return e >= line[..., None]


def universe_e(e_values) -> float:
    """The universe's e-value: the mean of its rows' (NaN rows left out; 1 with none)."""
    e = np.asarray(e_values, dtype=float)
    e = e[~np.isnan(e)]
    return float(e.mean()) if e.size else 1.0


@lru_cache(maxsize=1024)  # ~50 ms a call, pure in four numbers; every board sentence asks it again
def evenings_to_show(rate: float, family: int, alpha: float = ALPHA, share: float = 1.0) -> int | None:
    """Scored evenings after which a lone model winning `rate` of its counted evenings reaches e-BH's line
    for one discovery in a family of `family` (e >= family / alpha), on its expected path; `share` is the
    fraction of evenings that count (1 against a coin). None beyond MAX_EVENINGS (e.g. rate <= 1/2).
    Several models with edges lower each one's line, so this is what a lone edge needs."""
    if rate <= 0.5 or family < 1:
        return None
    n = np.arange(1, MAX_EVENINGS + 1, dtype=float)
    e = e_value(n * share * rate, n * share * (1 - rate))
    hit = np.flatnonzero(e >= family / alpha)
    return int(n[hit[0]]) if hit.size else None


HORIZON_EVENINGS = 1260  # five years of sessions: the horizon the power sentence speaks of
POWER_PATHS = 400  # simulated records per rate (the share shown is within +-2.5 points)


@lru_cache(maxsize=256)  # ~0.2 s a call; pure in its arguments (a fixed seed)
def waits_to_show(
    rate: float, family: int, alpha: float = ALPHA, horizon: int = HORIZON_EVENINGS, paths: int = POWER_PATHS
) -> tuple[float | None, float]:
    """(The median scored evenings until a lone model right on `rate` of its evenings is shown among
    `family` tickers, None if beyond `horizon`; the share of its records shown within `horizon`), simulated
    through the labels' own machinery: its e-value against a coin and against each board baseline, whose
    calls are independent of its own (each counting the evenings they disagree), the smallest of
    them (`e_skill`) reaching e-BH's line for a lone discovery (family / alpha). The expected path
    (`evenings_to_show`) is faster than the median: records that start unlucky wait long."""
    rng = np.random.default_rng(20261205)
    table = _e_table(horizon)  # e_value by (wins, losses): one lookup per evening, not a mixture each
    right = rng.random((paths, horizon)) < rate
    smallest = table[np.cumsum(right, axis=1), np.cumsum(~right, axis=1)]  # against the coin
    for _ in board_baselines():  # each a comparison besides the coin
        base = rng.random((paths, horizon)) < 0.5
        wins, losses = np.cumsum(right & ~base, axis=1), np.cumsum(~right & base, axis=1)
        smallest = np.minimum(smallest, table[wins, losses])
    hit = smallest >= family / alpha
    first = np.where(hit.any(axis=1), hit.argmax(axis=1) + 1, np.inf)
    median = float(np.median(first))
    return (median if math.isfinite(median) else None), float(np.isfinite(first).mean())


@lru_cache(maxsize=2)
def _e_table(horizon: int) -> np.ndarray:
    """e_value(w, l) for every w, l <= horizon."""
    counts = np.arange(horizon + 1, dtype=float)
    return e_value(counts[:, None], counts[None, :])


def detectable(family: int, rates=(0.55, 0.60, 0.70), alpha: float = ALPHA) -> str:
    """What a board of `family` rows could show, in words: for a lone model right at each rate, the share
    of its simulated records shown to beat every comparison within five years, and the median wait
    (`waits_to_show`: the labels' own e-values on simulated records, not the expected path)."""
    parts = []
    for r in rates:
        median, share = waits_to_show(r, family, alpha)
        wait = f"median ~{median:,.0f} evenings" if median is not None else "median beyond five years"
        parts.append(f"{r:.0%}: {share:.0%} ({wait})")
    return (
        f"shown within five years ({HORIZON_EVENINGS:,} scored evenings) among {family} tickers, a lone model "
        f"right on {'; '.join(parts)} of simulated records (its calls independent of the baselines'; "
        "several edges lower each other's line)"
    )
