"""Simulations of the gate's false-pass rates and power through its own functions, for the
tests and the null-universe benchmark (`benchmarks/null_universe.py` can import these).

No skill is exact here: the model's call is a fair coin independent of the move, so it is right with
probability 1/2 on every row whatever the market's up-rate. A planted edge makes it right with
probability `accuracy` instead. Each function returns rates, never asserts.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.signal import lfilter
from scipy.stats import wilcoxon

from ldtm_core.accountability.gate import champion_challenger as cc
from ldtm_core.accountability.gate.gate import evaluate
from ldtm_core.accountability.gate.ledger import spend
from ldtm_core.accountability.gate.policy import GateThresholds
from ldtm_core.horizons import DIRECTION
from ldtm_core.horizons import HORIZONS as ALL_HORIZONS
from ldtm_core.scoring.paired import HORIZONS, dm_error_test, holm, holm_over_tested, mcnemar_p


def _folds(rng, folds: int, rows: int, up_rate: float, accuracy: float) -> list[dict]:
    out = []
    for _ in range(folds):
        up = rng.random(rows) < up_rate
        right = rng.random(rows) < accuracy  # independent of the move: a coin at 0.5
        out.append(
            {
                "n": rows,
                "direction_accuracy": right.mean(),
                "always_up_accuracy": up.mean(),
                "mean_abs_pct_error": 1.0,
                "leakage_rows": 0,
                "model_only_hits": int((right & ~up).sum()),
                "up_only_hits": int((~right & up).sum()),
            }
        )
    return out


def first_deployment_pass_rate(
    reps: int,
    *,
    folds: int = 3,
    rows: int = 63,
    up_rate: float = 0.5,
    accuracy: float = 0.5,
    thresholds: GateThresholds | None = None,
    trials: int = 1,
    seed: int = 0,
) -> float:
    """Share of `reps` first-deployment judgements that pass: `gate.evaluate` (minimum evidence and the
    seed's bar), then, under the evidence policy, `champion_challenger.first_deployment`. The default
    backtest is 3 quarterly folds of 63 sessions (189 rows); `accuracy` 0.5 is no skill."""
    passes = first_deployment_passes(
        reps,
        folds=folds,
        rows=rows,
        up_rate=up_rate,
        accuracy=accuracy,
        thresholds=thresholds,
        trials=trials,
        seed=seed,
    )
    return len(passes) / reps


def first_deployment_passes(reps: int, **kw) -> list[tuple[list[dict], dict]]:
    """The judgements among `reps` first deployments (as `first_deployment_pass_rate` judges them) that
    pass: each one's backtest folds and what its stored gate report would say of the comparison
    ({"comparison": Comparison.to_dict()}, empty under the seed policy). What the decay monitor is then
    handed: only the models that passed."""
    return [(f, report) for f, report, passed in first_deployment_judgements(reps, **kw) if passed]


def first_deployment_judgements(
    reps: int,
    *,
    folds: int = 3,
    rows: int = 63,
    up_rate: float = 0.5,
    accuracy: float = 0.5,
    thresholds: GateThresholds | None = None,
    trials: int = 1,
    seed: int = 0,
) -> list[tuple[list[dict], dict, bool]]:
    """Every one of `reps` first deployments: its folds, its report (as above), and whether it passed."""
    t = thresholds or GateThresholds()
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(reps):
        f = _folds(rng, folds, rows, up_rate, accuracy)
        fig, _ = evaluate(f, t)
        report: dict = {}
        passed = fig["decision"] == "pass"
        if passed and t.policy == "evidence":
            comparison = cc.first_deployment(fig["skill"], t, fig["hits"], fig["scored"], trials)
            passed = comparison.decision == "pass"
            report = {"comparison": comparison.to_dict()} if passed else {}
        out.append((f, report, passed))
    return out


def recipe_search_pass_rate(
    reps: int, k: int, *, rows: int = 189, alpha: float = 0.05, adjusted: bool = True, seed: int = 0
) -> float:
    """Share of searches in which any of `k` coin challengers tried one after another on the same rows
    beats a coin champion (exact McNemar p_better <= alpha, or the ledger's level for the i-th try when
    `adjusted`, `gate.ledger.spend`)."""
    rng = np.random.default_rng(seed)
    hit = 0
    for _ in range(reps):
        champion = rng.random(rows) < 0.5
        for i in range(1, k + 1):
            challenger = rng.random(rows) < 0.5
            p = mcnemar_p(int((challenger & ~champion).sum()), int((~challenger & champion).sum()))
            if p <= (spend(alpha, i) if adjusted else alpha):
                hit += 1
                break
    return hit / reps


@dataclass(frozen=True)
class ErrorSize:
    h: int
    dm: float  # share of reps the DM test (EWC HAC, scoring.hac) calls the challenger worse at p <= alpha
    wilcoxon: float  # ... the Wilcoxon signed-rank test it replaced


def overlapping_errors(rng, rows: int, h: int, phi: float = 0.95, scale: float = 0.3, ratio: float = 1.0):
    """|pct errors| of two predictors on `rows` consecutive evenings at a horizon of `h` sessions: the
    answer is the sum of the next h daily moves (neighbouring rows overlap: MA(h - 1)), each predictor's
    call carries a persistent bias, AR(1) with coefficient `phi` and standard deviation `scale` times the
    horizon's move; the challenger's bias is `ratio` times as large (1: equal predictors)."""
    burn = 200
    daily = rng.standard_normal(rows + h)
    move = np.convolve(daily, np.ones(h), mode="valid")[1 : rows + 1]  # sum of the next h moves
    sd = scale * np.sqrt(h) * np.sqrt(1 - phi**2)
    bias = lfilter([1.0], [1.0, -phi], rng.standard_normal((2, rows + burn)) * sd, axis=1)[:, burn:]
    return np.abs(ratio * bias[0] - move), np.abs(bias[1] - move)


def error_test_size(
    reps: int,
    h: int,
    *,
    rows: int = 189,
    phi: float = 0.95,
    scale: float = 0.3,
    ratio: float = 1.0,
    alpha: float = 0.05,
    seed: int = 0,
) -> ErrorSize:
    """Rejection rate of "the challenger's errors are larger" (size when ratio = 1, power above it)."""
    rng = np.random.default_rng(seed)
    name = next((x.short for x in ALL_HORIZONS if x.overlap == h), DIRECTION.short)  # a label: h is given
    dm = wx = 0
    for _ in range(reps):
        a, b = overlapping_errors(rng, rows, h, phi, scale, ratio)
        dm += dm_error_test(name, a, b, h=h).p_worse <= alpha
        wx += wilcoxon(a - b, alternative="greater").pvalue <= alpha
    return ErrorSize(h, dm / reps, wx / reps)


def equal_refresh_refusal_rate(
    reps: int,
    *,
    rows: int = 189,
    phi: float = 0.95,
    scale: float = 0.3,
    alpha: float = 0.05,
    seed: int = 0,
    next_day_ratio: float = 1.0,
    every_horizon_in_holm: bool = False,
) -> tuple[float, float]:
    """(the gate's rule: Holm over the DM p-values of the horizons tested, the old rule: any horizon's
    Wilcoxon) share of refreshes refused for larger errors on at least one horizon: equal predictors, or
    with `next_day_ratio` a challenger whose next-day bias is that many times the champion's (power).
    `every_horizon_in_holm`: the rule before issue 62, an untested horizon counted in Holm with p = 1."""
    rng = np.random.default_rng(seed)
    holm_n = any_n = 0
    for _ in range(reps):
        tests, p_wx = [], []
        for name, h in zip(HORIZONS, (1, 5, 21), strict=True):
            a, b = overlapping_errors(rng, rows, h, phi, scale, next_day_ratio if h == 1 else 1.0)
            tests.append(dm_error_test(name, a, b, h=h))
            p_wx.append(wilcoxon(a - b, alternative="greater").pvalue)
        adjusted = (
            holm([t.p_worse for t in tests]) if every_horizon_in_holm else holm_over_tested(tests).values()
        )
        holm_n += min(adjusted) <= alpha
        any_n += min(p_wx) <= alpha
    return holm_n / reps, any_n / reps


def first_deployment_yearly_rate(
    reps: int,
    *,
    quarters: int = 4,
    folds: int = 3,
    rows: int = 63,
    up_rate: float = 0.5,
    accuracy: float = 0.5,
    thresholds: GateThresholds | None = None,
    ledger: bool = True,
    seed: int = 0,
) -> float:
    """Share of tickers (one recipe) whose first deployment passes at least once in `quarters`
    quarterly judgements. Folds are the `folds` newest quarters, so neighbouring judgements share all
    but one; weekly retrains within a quarter reproduce its evidence and are not judged again (evidence
    judged once). With `ledger` the i-th judgement is at `ledger.spend(alpha, k)`, k = the earlier judgements whose
    folds overlap it plus one (what `gate.ledger.trials` counts); without it every one is at alpha."""
    t = thresholds or GateThresholds()
    rng = np.random.default_rng(seed)
    hit = 0
    for _ in range(reps):
        blocks = [_folds(rng, 1, rows, up_rate, accuracy)[0] for _ in range(folds + quarters - 1)]
        for q in range(quarters):
            f = blocks[q : q + folds]
            fig, _ = evaluate(f, t)
            if fig["decision"] != "pass":
                continue
            k = min(q, folds - 1) + 1 if ledger else 1
            hits = fig["hits"]
            if (
                t.policy != "evidence"
                or cc.first_deployment(fig["skill"], t, hits, fig["scored"], k).decision == "pass"
            ):
                hit += 1
                break
    return hit / reps


def universe_rows(
    rng: np.random.Generator, evenings: int, tickers: int, edge: float, market_share: float = 0.8
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(challenger right, champion right, evening) for the universe verdict (`gate.universe`), one entry
    per (evening, ticker). The day's market moves `market_share` of the tickers together. The challenger
    makes one call per day for every ticker (a market-timing recipe: its rows of one day are one draw)
    and is right on 1/2 + `edge` of the rows; the champion is a coin per row."""
    market = rng.choice([-1, 1], size=(evenings, 1))
    truth = np.where(rng.random((evenings, tickers)) < market_share, market, -market)
    day_call = rng.choice([-1, 1], size=(evenings, 1)) * np.ones((1, tickers))
    skilled = rng.random((evenings, tickers)) < 2 * edge  # called right; the rest by the day's call
    challenger = np.where(skilled, truth, day_call) == truth
    champion = rng.random((evenings, tickers)) < 0.5
    return challenger.ravel(), champion.ravel(), np.repeat(np.arange(evenings), tickers)
