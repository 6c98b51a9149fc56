"""What a gated model's accuracy should be expected to be: the best estimate after the gate's selection.

A backtest kept because it passed overstates its model (true-55 % models that passed showed ~60 %), and
the exact lower bound the decay charts run against (`record.Promise.promised`) understates it (53 %).
Neither is the figure to expect. Empirical Bayes: the true accuracies of the candidates the gate judges
are taken as drawn from one Beta(a, b), fitted by maximum likelihood (beta-binomial) to every stored
backtest's pooled hits, passed or not; a model's expected accuracy is its posterior mean given its own
backtest, (hits + a) / (n + a + b). A posterior given the data is not biased by selecting on that data,
so the passers' expected accuracies average their true ones when the prior describes the candidates
(`benchmarks/decay_null.py`). With fewer than MIN_BACKTESTS backtests the prior is DEFAULT_PRIOR.
The alarm is a separate figure: the charts still expect the lower bound (their designed false-alarm
rate rests on it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.optimize import minimize
from scipy.stats import betabinom

MIN_BACKTESTS = 5
# Without enough backtests to fit: a coin's accuracy, about as sure as 200 evenings (sd ~3.5 points),
# since what finance mostly offers is a few points over it.
DEFAULT_PRIOR = (100.0, 100.0)
MAX_STRENGTH = 1e6  # a + b: every candidate the same (no spread to learn) sits at this bound


@dataclass(frozen=True)
class Prior:
    a: float
    b: float
    backtests: int  # how many it was fitted on (0: DEFAULT_PRIOR)

    @property
    def mean(self) -> float:
        return self.a / (self.a + self.b)

    def expected(self, hits: float, n: float) -> float:
        """The posterior mean accuracy of a model with `hits` of `n` in its backtest."""
        return (hits + self.a) / (n + self.a + self.b)

    def describe(self) -> str:
        if not self.backtests:
            return f"a default prior (mean {self.mean:.1%}, fewer than {MIN_BACKTESTS} backtests stored)"
        sd = math.sqrt(self.mean * (1 - self.mean) / (self.a + self.b + 1))
        return f"fitted to {self.backtests} backtests (mean {self.mean:.1%}, spread {sd * 100:.1f} points)"


def fit_prior(hits, n) -> Prior:
    """The Beta(a, b) that maximises the beta-binomial likelihood of the backtests' (hits, n)."""
    h, m = np.asarray(hits, float), np.asarray(n, float)
    keep = m > 0
    h, m = np.round(h[keep]), m[keep]
    if len(h) < MIN_BACKTESTS:
        return Prior(*DEFAULT_PRIOR, 0)
    mean0 = float(np.clip(h.sum() / m.sum(), 0.01, 0.99))

    def nll(x) -> float:  # x = (logit of the mean, log of the strength a + b)
        mu, s = 1 / (1 + math.exp(-x[0])), math.exp(x[1])
        return -float(betabinom.logpmf(h, m, mu * s, (1 - mu) * s).sum())

    start = np.array([math.log(mean0 / (1 - mean0)), math.log(200.0)])
    best = minimize(nll, start, method="Nelder-Mead", options={"xatol": 1e-4, "fatol": 1e-6, "maxiter": 400})
    mu, s = 1 / (1 + math.exp(-best.x[0])), min(math.exp(best.x[1]), MAX_STRENGTH)
    return Prior(mu * s, (1 - mu) * s, len(h))
