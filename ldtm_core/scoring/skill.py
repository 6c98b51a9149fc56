"""Is the model right more often than always-up on the same rows? (SPEC §9, §10)

A direction accuracy a few points either side of always-up says nothing on its own: on the rows where
the model also says "up" the two are right or wrong together. Only the rows where they disagree carry
evidence (McNemar's insight). On those discordant rows exactly one of the two is right; if the model were
no better than always-up, each such row would be a fair coin. The one-sided exact test (exact McNemar,
i.e. a sign test on the discordant rows) asks how surprising it is that the model won at least
`model_only` of the `model_only + up_only` disagreements:

    p = P(X >= model_only),  X ~ Binomial(model_only + up_only, 1/2)

A small p (e.g. <= 0.05) is evidence the model beats always-up; a large one means it may not.
With no discordant rows there is no evidence either way and p = 1. Ties (a zero next-day move) are
nobody's hit or miss: callers pass only the decided rows (fillback.direction_hit, backtest.skill_test).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np


@dataclass(frozen=True)
class SkillTest:
    """The discordant rows of model vs always-up and the one-sided exact p-value."""

    model_only: int  # model right, always-up wrong
    up_only: int  # always-up right, model wrong

    @property
    def discordant(self) -> int:
        return self.model_only + self.up_only

    @property
    def p_value(self) -> float:
        return sign_test_p_value(self.model_only, self.up_only)

    def describe(self) -> str:
        return (
            f"model right on {self.model_only} vs always-up on {self.up_only} of {self.discordant} "
            f"disagreements, one-sided p = {format_p_value(self.p_value)}"
        )


@lru_cache(maxsize=65536)  # pure in two small ints; a 103-ticker board (and its simulations) repeats them
def sign_test_p_value(model_only: int, up_only: int) -> float:
    """P(X >= model_only) for X ~ Binomial(model_only + up_only, 1/2): exact, in integers."""
    if model_only < 0 or up_only < 0:
        raise ValueError(f"discordant counts must be >= 0, not {model_only} and {up_only}")
    n = model_only + up_only
    if n == 0:
        return 1.0
    # Exact integer tail over 2**n; true division of Python ints rounds once, so no underflow.
    tail = sum(math.comb(n, k) for k in range(model_only, n + 1))
    return tail / (1 << n)


def discordant_counts(model_right: np.ndarray, actual_up: np.ndarray) -> SkillTest:
    """Counts from per-row booleans: was the model's direction right, did the price go up.

    Always-up is right exactly when the price went up; the rows where one of the two is right and the
    other wrong are the discordant ones.
    """
    model_right = np.asarray(model_right, dtype=bool)
    up_right = np.asarray(actual_up, dtype=bool)
    return SkillTest(
        model_only=int((model_right & ~up_right).sum()),
        up_only=int((~model_right & up_right).sum()),
    )


def pooled(tests: list[SkillTest | None]) -> SkillTest | None:
    """The test on the union of disjoint row sets (e.g. backtest folds); None when any part is unknown."""
    if not tests or any(t is None for t in tests):
        return None
    return SkillTest(sum(t.model_only for t in tests), sum(t.up_only for t in tests))


@dataclass(frozen=True)
class PooledDirection:
    """Backtest folds' next-day direction pooled over their decided rows (a zero move, a tie, is nobody's
    hit or miss: 0026); `rows` counts every test row, ties included. `hit_sum` / `up_sum`: the folds'
    accuracies times their decided rows (whole numbers for folds a backtest wrote)."""

    rows: int
    scored: int
    hit_sum: float
    up_sum: float

    @property
    def hits(self) -> int:
        return int(round(self.hit_sum))

    @property
    def accuracy(self) -> float:
        return self.hit_sum / self.scored if self.scored else 0.0

    @property
    def always_up(self) -> float:
        return self.up_sum / self.scored if self.scored else 0.0


def pooled_direction(folds) -> PooledDirection:
    """Pool fold records ({n, ties, direction_accuracy, always_up_accuracy}; the accuracies over the
    fold's decided rows, ties NULL on folds written before 0026: none known)."""
    rows = scored = 0
    hits = up = 0.0
    for f in folds:
        n = int(f["n"])
        ties = f.get("ties")
        decided = n - (0 if ties is None or (isinstance(ties, float) and math.isnan(ties)) else int(ties))
        rows, scored = rows + n, scored + decided
        hits += float(f["direction_accuracy"]) * decided
        up += float(f["always_up_accuracy"]) * decided
    return PooledDirection(rows, scored, hits, up)


def format_p_value(p: float | None) -> str:
    if p is None or (isinstance(p, float) and math.isnan(p)):
        return "—"
    return "< 0.001" if p < 0.001 else f"{p:.3f}"
