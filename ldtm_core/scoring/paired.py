"""Two predictors on identical rows, paired row by row: the statistics of champion vs
challenger, pure functions of per-row predictions and answers.

Direction: the exact McNemar test. Rows where both are right or both wrong say nothing about which is
better; on the discordant rows exactly one is right, and if the two were equally good each such row
would be a fair coin. `p_better` = P(X >= challenger_only), X ~ Binomial(discordant, 1/2)
(`scipy.stats.binomtest(..., alternative='greater')`); `p_worse` the same for the champion.

Errors: per horizon (ldtm_core.horizons) the Diebold-Mariano test of the paired loss differential
d_t = |challenger pct error| - |champion pct error| (`dm_test`, `dm_error_test`), through the one
overlap-aware test every such figure uses (`scoring.hac.mean_test`: an equal-weighted cosine long-run
variance against Student t, and no test below 10 independent target periods). Consecutive evenings'
next-Monday and one-month targets share most of their window and model errors are persistent, so a
test that treats rows as independent (the Wilcoxon this replaced) or a Newey-West lag of h - 1 against
t(T - 1) calls one of two equal predictors worse far above its level (benchmarks/hac_size.py).
The horizons give ONE decision: Holm over the one-sided p-values of the horizons tested (`holm`; one too
short to test is left out of the family), so an equal challenger is refused at most about alpha of the
time, not once per horizon. The shadow's live comparison uses the
same `dm_error_test`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np
from scipy.stats import binomtest

from ldtm_core.horizons import HORIZONS as ALL_HORIZONS
from ldtm_core.horizons import SHORT_NAMES
from ldtm_core.scoring import baselines, hac
from ldtm_core.scoring.baselines import Paired
from ldtm_core.scoring.skill import format_p_value

# Error tests are keyed by each horizon's short name (stored in gate reports).
HORIZONS = SHORT_NAMES
HORIZON_LABELS = {h.short: h.label for h in ALL_HORIZONS}
# Sessions each horizon spans (next Monday is up to 5 sessions ahead): the overlap of neighbouring rows,
# by short name and by name (the shadow's live test names its horizon).
HORIZON_SESSIONS = {k: h.overlap for h in ALL_HORIZONS for k in (h.short, h.name)}


@dataclass(frozen=True)
class DMTest:
    """Diebold-Mariano on a loss differential d (one-sided both ways), through `hac.mean_test`."""

    n: int
    horizon_sessions: int
    dof: int  # degrees of freedom of the EWC long-run variance (Student t reference)
    mean: float
    statistic: float
    p_greater: float  # P of "mean(d) > 0" being this large by chance; 1.0 when untested
    p_less: float
    too_short: bool = False  # fewer than hac.MIN_INDEPENDENT_PERIODS target periods: not tested


# The practical margin of the |error| comparison: a share of the champion's mean |error| on the horizon
# (LDTM_GATE_ERROR_MARGIN_PCT), so one number suits next-day errors of ~1 % and one-month errors of ~6 %.
DEFAULT_ERROR_MARGIN = 0.01


def dm_test(d: np.ndarray, h: int = 1) -> DMTest:
    """DM = mean(d) / its EWC standard error against t(dof) (`hac.mean_test`). Too short a record, or a
    constant differential (identical errors), is no evidence either way: both p-values 1.0."""
    d = np.asarray(d, float)
    test = hac.mean_test(d, h)
    if not math.isfinite(test.p_two_sided):
        return DMTest(test.n, test.horizon_sessions, test.dof, test.mean, 0.0, 1.0, 1.0, test.too_short)
    return DMTest(test.n, test.horizon_sessions, test.dof, test.mean, test.t, test.p_greater, test.p_less)


def holm(p_values) -> list[float]:
    """Holm-adjusted p-values: one decision over the horizons at family-wise level alpha.

    statsmodels' `multipletests(p, method="holm")` in a few lines (tested against it): it runs
    gc.collect() on every call, 0.2 s in a process holding torch and Dagster."""
    p = np.asarray([float(x) for x in p_values])
    order = np.argsort(p, kind="stable")
    adjusted = np.empty_like(p)
    adjusted[order] = np.minimum(np.maximum.accumulate(p[order] * np.arange(len(p), 0, -1)), 1.0)
    return [float(x) for x in adjusted]


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
    p_worse: float  # one-sided Diebold-Mariano (EWC HAC): the challenger's errors are larger
    p_better: float  # ... smaller
    dof: int = 0  # degrees of freedom of the EWC variance
    too_short: bool = False  # too few independent target periods: untested (p 1.0)
    needs: int = 0  # rows a test of this horizon needs
    margin: float = 0.0  # points of |pct error| a difference must exceed to count (dm_error_test)
    # The no-change forecast's (the run-date close) mean |pct error| on the same rows: a naive comparator
    # (MASE-style: a model's |error| over this one below 1 beats no change); NaN when not known.
    naive_mae: float = float("nan")

    def p_text(self, p: float) -> str:
        """A p-value, or why there is none."""
        return f"too short to test (needs {self.needs} rows)" if self.too_short else format_p_value(p)


def dm_error_test(
    horizon: str,
    challenger_err: np.ndarray,
    champion_err: np.ndarray,
    h: int | None = None,
    margin: float = DEFAULT_ERROR_MARGIN,
) -> ErrorTest:
    """The gate's paired |error| comparison of one horizon, rows in time order: `dm_test` on the
    differences (h: sessions the horizon spans, by default from its name, 1 when unknown), each side
    beyond a practical margin: `margin` times the champion's mean |error| (worse: mean difference above
    +m; better: below -m). Without it a difference of 1e-9 points on every row is "significant"."""
    a, b = np.asarray(challenger_err, float), np.asarray(champion_err, float)
    n = len(a)
    if n == 0:
        return ErrorTest(horizon, 0, float("nan"), float("nan"), 1.0, 1.0)
    h = HORIZON_SESSIONS.get(horizon, 1) if h is None else h
    m = float(margin) * float(b.mean())
    worse, better = dm_test(a - b - m, h), dm_test(a - b + m, h)
    return ErrorTest(
        horizon, n, float(a.mean()), float(b.mean()), worse.p_greater, better.p_less, worse.dof,
        worse.too_short, hac.evenings_needed(h), m,
    )  # fmt: skip


def holm_over_tested(errors) -> dict[str, float]:
    """{horizon: Holm-adjusted p_worse} over the ErrorTests that ran; 1.0 for one too short to test."""
    tested = [e for e in errors if not e.too_short]
    adjusted = dict(zip([e.horizon for e in tested], holm([e.p_worse for e in tested]), strict=True))
    return {e.horizon: adjusted.get(e.horizon, 1.0) for e in errors}


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
    def errors_worse_holm(self) -> dict[str, float]:
        """{horizon: Holm-adjusted p of "the challenger's errors are larger"}: one decision over the
        horizons tested. One too short to test is not in the family (its p is 1.0): counted with p = 1 it
        split alpha three ways where two tests ran (the default backtest's one-month test never does)."""
        return holm_over_tested(self.errors)

    @property
    def error_worse_p(self) -> float:
        """The smallest Holm-adjusted p over the horizons (1.0 with none): <= alpha refuses once."""
        return min(self.errors_worse_holm.values(), default=1.0)

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
            f"(no change {e.naive_mae:.3f}%) "
            f"(DM p worse {e.p_text(e.p_worse)}, Holm {e.p_text(self.errors_worse_holm[e.horizon])})"
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
                    "naive_mae": e.naive_mae,
                    "p_worse": e.p_worse,
                    "p_worse_holm": self.errors_worse_holm[e.horizon],
                    "p_better": e.p_better,
                    "ewc_dof": e.dof,
                    "too_short": e.too_short,
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
    """[n, H] |pred - actual| / actual in percent; NaN where the answer is not known yet."""
    return np.abs(np.asarray(pred, float) - actual) / actual * 100.0


def compare(
    challenger_pred: np.ndarray,
    champion_pred: np.ndarray,
    actual: np.ndarray,
    close: np.ndarray,
    calls: dict[str, np.ndarray] | None = None,
    fold: np.ndarray | None = None,
    labels: tuple[str, str] = ("candidate", "champion"),
    error_margin: float = DEFAULT_ERROR_MARGIN,
) -> PairedComparison:
    """Pair two predictors row by row. `*_pred`: [n, H] (or [n] next-day) predicted prices; `actual`:
    [n, H] (or [n]) answers, NaN where unknown; `close`: the run-date close; `calls` ({baseline: call
    per row}, baselines.calls) enables the baselines; `fold`: the fold of each row; `error_margin`: the
    |error| tests' practical margin (`dm_error_test`)."""
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
        test = dm_error_test(HORIZONS[h], e_ch[known, h], e_cm[known, h], margin=error_margin)
        naive = abs_pct_errors(close[known], act[known, h])
        errors.append(replace(test, naive_mae=float(naive.mean()) if len(naive) else float("nan")))
    base, champ_base = {}, {}
    if calls is not None:
        base = baselines.score(ch_right, act[:, 0], close, calls)
        champ_base = baselines.score(cm_right, act[:, 0], close, calls)
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
