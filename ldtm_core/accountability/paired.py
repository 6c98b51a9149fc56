"""Two predictors on identical rows, paired row by row (issue 21): the statistics of champion vs
challenger, pure functions of per-row predictions and answers.

Direction: the exact McNemar test. Rows where both are right or both wrong say nothing about which is
better; on the discordant rows exactly one is right, and if the two were equally good each such row
would be a fair coin. `p_better` = P(X >= challenger_only), X ~ Binomial(discordant, 1/2)
(`scipy.stats.binomtest(..., alternative='greater')`); `p_worse` the same for the champion.

Errors: per horizon (ldtm_core.horizons) the one-sided Wilcoxon signed-rank test of the
paired differences |challenger pct error| - |champion pct error| (`scipy.stats.wilcoxon`, zero
differences dropped). It is chosen over a sign test because it uses how much larger an error is, not
only which is larger, and over a paired t-test because pct errors are heavy-tailed. Caveat: a horizon
with `overlap` > 1 (next Monday, one month) shares its path on consecutive rows, so their rows are not
independent and their p-values are optimistic; the gate uses them only to refuse a challenger that is significantly worse, where an
optimistic p errs on the side of keeping the champion.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from scipy.stats import binomtest, wilcoxon

from ldtm_core.accountability import baselines
from ldtm_core.accountability.baselines import Paired
from ldtm_core.accountability.skill import format_p_value
from ldtm_core.horizons import HORIZONS as ALL_HORIZONS
from ldtm_core.horizons import SHORT_NAMES

# Error tests are keyed by each horizon's short name (stored in gate reports).
HORIZONS = SHORT_NAMES
HORIZON_LABELS = {h.short: h.label for h in ALL_HORIZONS}


def mcnemar_p(wins: int, losses: int) -> float:
    """One-sided exact McNemar: P(X >= wins), X ~ Binomial(wins + losses, 1/2); 1.0 with no discordant rows."""
    n = int(wins) + int(losses)
    return 1.0 if n == 0 else float(binomtest(int(wins), n, 0.5, alternative="greater").pvalue)


@dataclass(frozen=True)
class ErrorTest:
    """|pct error| of both on the rows of one horizon whose answer is known."""

    horizon: str
    n: int
    challenger_mae: float
    champion_mae: float
    p_worse: float  # one-sided Wilcoxon: the challenger's errors are larger
    p_better: float  # ... smaller


def error_test(horizon: str, challenger_err: np.ndarray, champion_err: np.ndarray) -> ErrorTest:
    a, b = np.asarray(challenger_err, float), np.asarray(champion_err, float)
    n = len(a)
    if n == 0:
        return ErrorTest(horizon, 0, float("nan"), float("nan"), 1.0, 1.0)
    d = a - b
    if not np.any(d != 0):  # identical errors: no evidence either way (wilcoxon refuses all-zero)
        worse = better = 1.0
    else:
        worse = float(wilcoxon(d, alternative="greater").pvalue)
        better = float(wilcoxon(d, alternative="less").pvalue)
    return ErrorTest(horizon, n, float(a.mean()), float(b.mean()), worse, better)


@dataclass(frozen=True)
class PairedComparison:
    """Challenger vs champion on the same rows: hits, discordant rows, p-values, errors, baselines."""

    challenger: str  # what each side is, for the report ("candidate"/"champion", "refreshed"/"stale")
    champion: str
    n: int
    fold_rows: tuple[int, ...]  # rows per fold
    challenger_hits: int
    champion_hits: int
    challenger_only: int  # challenger right, champion wrong
    champion_only: int
    errors: tuple[ErrorTest, ...] = ()
    # always-up, persistence, trailing majority on the same rows, each paired with one side
    baselines: dict[str, Paired] = field(default_factory=dict)
    champion_baselines: dict[str, Paired] = field(default_factory=dict)

    @property
    def discordant(self) -> int:
        return self.challenger_only + self.champion_only

    @property
    def challenger_accuracy(self) -> float:
        return self.challenger_hits / self.n if self.n else float("nan")

    @property
    def champion_accuracy(self) -> float:
        return self.champion_hits / self.n if self.n else float("nan")

    @property
    def p_better(self) -> float:
        """One-sided exact McNemar p of "the challenger is right more often than the champion"."""
        return mcnemar_p(self.challenger_only, self.champion_only)

    @property
    def p_worse(self) -> float:
        """... of "the champion is right more often than the challenger"."""
        return mcnemar_p(self.champion_only, self.challenger_only)

    def describe(self) -> str:
        errs = ", ".join(
            f"|err| {HORIZON_LABELS[e.horizon]} {e.challenger_mae:.3f}% vs {e.champion_mae:.3f}% "
            f"(p worse {format_p_value(e.p_worse)})"
            for e in self.errors
        )
        return (
            f"{self.challenger} {self.challenger_accuracy * 100:.2f}% vs {self.champion} "
            f"{self.champion_accuracy * 100:.2f}% on the same {self.n} rows over {len(self.fold_rows)} "
            f"folds; {self.challenger} right on {self.challenger_only} vs {self.champion} on "
            f"{self.champion_only} of {self.discordant} disagreements, exact McNemar p (better) = "
            f"{format_p_value(self.p_better)}, p (worse) = {format_p_value(self.p_worse)}"
            + (f"; {errs}" if errs else "")
        )

    def to_dict(self) -> dict:
        return {
            "challenger": self.challenger,
            "champion": self.champion,
            "n": self.n,
            "fold_rows": list(self.fold_rows),
            "challenger_accuracy": self.challenger_accuracy,
            "champion_accuracy": self.champion_accuracy,
            "challenger_only": self.challenger_only,
            "champion_only": self.champion_only,
            "p_better": self.p_better,
            "p_worse": self.p_worse,
            "errors": {
                e.horizon: {
                    "n": e.n,
                    "challenger_mae": e.challenger_mae,
                    "champion_mae": e.champion_mae,
                    "p_worse": e.p_worse,
                    "p_better": e.p_better,
                }
                for e in self.errors
            },
            "baselines": {
                name: {
                    "accuracy": b.accuracy,
                    "challenger_p_value": b.p_value,
                    "champion_p_value": self.champion_baselines[name].p_value
                    if name in self.champion_baselines
                    else None,
                }
                for name, b in self.baselines.items()
            },
        }


def abs_pct_errors(pred: np.ndarray, actual: np.ndarray) -> np.ndarray:
    """[n, 3] |pred - actual| / actual in percent; NaN where the answer is not known yet."""
    return np.abs(np.asarray(pred, float) - actual) / actual * 100.0


def compare(
    challenger_pred: np.ndarray,
    champion_pred: np.ndarray,
    actual: np.ndarray,
    close: np.ndarray,
    prev_close: np.ndarray | None = None,
    trend: np.ndarray | None = None,
    fold: np.ndarray | None = None,
    labels: tuple[str, str] = ("candidate", "champion"),
) -> PairedComparison:
    """Pair two predictors row by row. `*_pred`: [n, 3] (or [n] next-day) predicted prices; `actual`:
    [n, H] (or [n]) answers, NaN where unknown; `close`: the run-date close; `prev_close` / `trend`
    (the trailing-majority call per row) enable the baselines; `fold`: the fold of each row."""
    ch, cm, act = (np.asarray(a, float) for a in (challenger_pred, champion_pred, actual))
    ch, cm, act = (a.reshape(len(a), -1) for a in (ch, cm, act))
    close = np.asarray(close, float)
    n = len(close)
    if not (len(ch) == len(cm) == len(act) == n):
        raise ValueError(f"paired rows differ in length: {len(ch)}, {len(cm)}, {len(act)}, {n}")
    truth = np.sign(act[:, 0] - close)
    ch_right = np.sign(ch[:, 0] - close) == truth
    cm_right = np.sign(cm[:, 0] - close) == truth
    errors = []
    e_ch, e_cm = abs_pct_errors(ch, act), abs_pct_errors(cm, act)
    for h in range(min(act.shape[1], ch.shape[1], cm.shape[1], len(HORIZONS))):
        known = np.isfinite(e_ch[:, h]) & np.isfinite(e_cm[:, h])
        errors.append(error_test(HORIZONS[h], e_ch[known, h], e_cm[known, h]))
    base, champ_base = {}, {}
    if prev_close is not None and trend is not None:
        base = baselines.score(ch_right, act[:, 0], close, prev_close, trend)
        champ_base = baselines.score(cm_right, act[:, 0], close, prev_close, trend)
    fold = np.zeros(n, int) if fold is None else np.asarray(fold)
    _, counts = np.unique(fold, return_counts=True)
    return PairedComparison(
        challenger=labels[0],
        champion=labels[1],
        n=n,
        fold_rows=tuple(int(c) for c in counts),
        challenger_hits=int(ch_right.sum()),
        champion_hits=int(cm_right.sum()),
        challenger_only=int((ch_right & ~cm_right).sum()),
        champion_only=int((~ch_right & cm_right).sum()),
        errors=tuple(errors),
        baselines=base,
        champion_baselines=champ_base,
    )
