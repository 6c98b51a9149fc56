"""One test for the mean of an autocorrelated series: every overlap-aware p-value goes through it.

Consecutive evenings' week and month targets share most of their window, and predictions are
persistent, so a daily IC, spread or loss difference is autocorrelated far beyond lag 0. A Newey-West
variance of lag h - 1 read against normal or t(T - 1) critical values over-rejects on the records users
read (one-month IC 9-24 % at a nominal 5 %). This test uses the equal-weighted cosine (EWC) long-run
variance with Student t(nu) critical values (Lazarus, Lewis, Stock and Watson 2018): the variance is the
mean square of the series' first nu cosine projections, which under the fixed-b asymptotics makes the
t-statistic t(nu) exactly for Gaussian white noise and asymptotically otherwise.

nu (the degrees of freedom) is 0.3 T^(2/3) (LLSW's rule with a smaller constant, measured), capped at half the series' independent values:
T / (2 span), span the larger of the overlap h and the AR(1) variance inflation (1 + rho) / (1 - rho) of
its lag-1 autocorrelation, so persistent errors get fewer, lower cosines. Below MIN_INDEPENDENT_PERIODS non-overlapping target periods
(T / h) there is no p-value: the record is "too short to test". The size of this rule is simulated at 60,
190 and 750 evenings for each horizon (benchmarks/hac_size.py, docs/performance.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.fft import dct
from scipy.stats import t as student_t

MIN_INDEPENDENT_PERIODS = 10  # fewer non-overlapping target periods than this: no p-value
MIN_DOF = 2
# LLSW's rule is 0.4 n^(2/3), tuned on AR(1) rho 0.7; 0.3 keeps the size of the gate's |error| test at
# 5-6 % on errors as persistent as the models' (phi 0.9) from 60 evenings (benchmarks/hac_size.py).
DOF_SCALE = 0.3


MAX_PERSISTENCE = 0.95  # the lag-1 autocorrelation read is capped here (a near-unit root says little)


def persistence_span(values, h: int = 1) -> float:
    """How many consecutive values carry one value's worth of information: at least the overlap h, and
    (1 + rho) / (1 - rho) for the series' lag-1 autocorrelation rho (an AR(1)'s variance inflation)."""
    y = np.asarray(values, float)
    rho = 0.0
    if len(y) > 2 and np.std(y) > 0:
        rho = float(np.clip(np.corrcoef(y[1:], y[:-1])[0, 1], 0.0, MAX_PERSISTENCE))
    return max(float(max(int(h), 1)), (1 + rho) / (1 - rho))


def ewc_dof(n: int, span: float = 1.0) -> int:
    """Cosines in the EWC variance: DOF_SCALE n^(2/3), at most half the n / span independent values
    (so the cosines stay below the frequencies the overlap and the persistence flatten), at least
    MIN_DOF."""
    return max(MIN_DOF, min(int(DOF_SCALE * n ** (2 / 3)), int(n / (2 * max(span, 1.0)))))


def independent_periods(n: int, h: int = 1) -> float:
    """How many non-overlapping h-session target periods n consecutive evenings span."""
    return n / max(int(h), 1)


def evenings_needed(h: int = 1) -> int:
    """Evenings a record needs before it is tested (MIN_INDEPENDENT_PERIODS periods of h sessions)."""
    return MIN_INDEPENDENT_PERIODS * max(int(h), 1)


def ewc_long_run_variance(values, nu: int) -> float:
    """The mean of the squared projections of the demeaned series on cos(pi j (t - 1/2) / n), j = 1..nu,
    each scaled to unit norm (scipy's orthonormal DCT-II)."""
    u = np.asarray(values, float)
    u = u - u.mean()
    coef = dct(u, type=2, norm="ortho")[1 : nu + 1]
    return float(np.mean(coef * coef))


@dataclass(frozen=True)
class MeanTest:
    """Is the mean of a series zero? The EWC t-test, or "too short to test"."""

    n: int  # finite values
    horizon_sessions: int
    mean: float
    se: float
    t: float
    dof: int
    p_two_sided: float  # NaN when too short (or nothing varies)
    p_greater: float  # one-sided: mean > 0
    p_less: float

    @property
    def periods(self) -> float:
        return independent_periods(self.n, self.horizon_sessions)

    @property
    def too_short(self) -> bool:
        return self.periods < MIN_INDEPENDENT_PERIODS

    def why_untested(self) -> str:
        """Why no p-value, in words ("" when there is one)."""
        if self.too_short:
            return (
                f"too short to test: {self.n} evenings span {self.periods:.1f} independent "
                f"{self.horizon_sessions}-session periods; needs {evenings_needed(self.horizon_sessions)}"
            )
        return "" if math.isfinite(self.p_two_sided) else "nothing varies: no test"


def mean_test(values, h: int = 1) -> MeanTest:
    """The EWC t-test of mean(values) = 0 for a series whose neighbours overlap by h - 1 sessions
    (values in time order; non-finite values dropped)."""
    y = np.asarray(values, dtype=float)
    y = y[np.isfinite(y)]
    n, h = len(y), max(int(h), 1)
    mean = float(y.mean()) if n else math.nan
    nu = ewc_dof(n, persistence_span(y, h))
    nan = math.nan
    if independent_periods(n, h) < MIN_INDEPENDENT_PERIODS or n < 2 * MIN_DOF + 1:
        return MeanTest(n, h, mean, nan, nan, nu, nan, nan, nan)
    lrv = ewc_long_run_variance(y, nu)
    if not lrv > 0:
        return MeanTest(n, h, mean, nan, nan, nu, nan, nan, nan)
    se = math.sqrt(lrv / n)
    t = mean / se
    return MeanTest(
        n,
        h,
        mean,
        se,
        t,
        nu,
        float(2 * student_t.sf(abs(t), nu)),
        float(student_t.sf(t, nu)),
        float(student_t.cdf(t, nu)),
    )
