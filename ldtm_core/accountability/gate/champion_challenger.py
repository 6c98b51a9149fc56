"""Champion vs challenger on identical walk-forward rows: the evidence the evidence-policy
gate decides on once the candidate met the minimum evidence and the seed's absolute bar.

Which evidence depends on what serves the ticker now (docs/architecture.md, *Promotion gate*):

- **paired backtest of configs** — the candidate's config differs from the champion's (a tuned recipe,
  an override, another profile): the champion's config is backtested over the same folds (same
  cutoffs, purge, test sessions, the very prices the candidate's backtest read), reusing stored folds
  (`fold_cache`), and the two are paired row by row on (fold, date). Pass only if the candidate is
  right more often at McNemar p <= spend(alpha, k) (the k-th try on these folds, `gate.ledger`) and
  the |errors| are not significantly worse (Diebold-Mariano, Holm over the horizons).
- **stale vs refreshed** — the same recipe (the weekly retrain): its config-level backtest *is* the
  champion's, so comparing configs is empty. Instead, per fold k >= 2, the weights fitted to fold
  k-1's cutoff (stale: the model as it would serve had it not been refreshed) and fold k's own weights
  (refreshed through this cutoff) predict fold k's rows, pooled over folds. It answers "does
  refreshing this recipe help on this ticker", not "are this week's weights good": that evidence comes
  only from rows the new weights have not seen, the live shadow evenings (LDTM_SHADOW_SESSIONS).
  Pass unless the stale weights are better at p <= alpha (direction, or the |errors| after Holm).
- **first deployment** — no active model: the candidate must beat a coin (exact binomial test of its
  hits against 50 %) and always-up (exact McNemar on the disagreements), each at p <= spend(alpha, k). A
  model with no skill is right with probability 1/2 on every row whatever the market does, so the coin
  test alone bounds its false-pass rate by that level per judgement (measured: `gate.sim`); always-up is
  required beside it so a model that only rides the market's drift does not pass.

A backtest written before per-row predictions (revision 0022) or discordant counts were stored cannot
be paired: the decision then rests on the absolute criteria alone and the report says so.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

import numpy as np
import torch
from scipy.stats import binomtest
from sqlalchemy import Engine, select

from ldtm_core.accountability.gate import ledger as gate_ledger
from ldtm_core.accountability.gate.policy import Criterion, GateThresholds
from ldtm_core.config import Settings
from ldtm_core.data.feature_store import prices_and_features
from ldtm_core.data.samples import SampleSet, build_samples
from ldtm_core.errors import InputError, NotFoundError
from ldtm_core.horizons import HORIZONS
from ldtm_core.learning import fold_cache
from ldtm_core.learning.backtest import DEFAULT_WARM_START, predict_prices, run_backtest
from ldtm_core.learning.model import LDTM, ModelConfig, get_profile
from ldtm_core.learning.recipes import LSTM, global_backtest
from ldtm_core.learning.registry import ModelRecord, active_model
from ldtm_core.schema import backtest_fold_results, corporate_actions
from ldtm_core.scoring import baselines
from ldtm_core.scoring.paired import PairedComparison, compare, mcnemar_p
from ldtm_core.scoring.skill import SkillTest, format_p_value

CONFIGS = "paired backtest of configs"
REFRESH = "stale vs refreshed"
FIRST = "vs a coin and always-up (first deployment)"
ABSOLUTE = "absolute criteria only"

RULES = {
    CONFIGS: "the candidate must be right more often than the champion on the same rows (exact McNemar "
    "p <= {alpha_adj}: try {trials} on these folds, alpha {alpha} spent over every try) and its |errors| not "
    "significantly worse beyond a practical margin (Diebold-Mariano with HAC variance, Holm over the "
    "horizons long enough to test, p <= {alpha}; a horizon too short is not tested and not in the family); a tie "
    "keeps the champion",
    REFRESH: "the refreshed weights must not be significantly worse than the stale ones on the next "
    "fold's rows (stale better at exact McNemar p <= {alpha}, or the |errors| worse at Diebold-Mariano "
    "p <= {alpha} after Holm over the horizons long enough to test, fails)",
    FIRST: "no active model: the candidate must beat a coin (exact binomial test of its hits vs 50 %) "
    "and always-up (exact McNemar on the disagreements), each at p <= {alpha_adj} (try {trials} on these "
    "folds, alpha {alpha} spent over every try)",
    ABSOLUTE: "no paired comparison",
}


@dataclass
class Comparison:
    """The gate's paired evidence: which, its criteria and decision, the paired figures when any."""

    evidence: str
    decision: str  # "pass", "fail" or "insufficient evidence"
    alpha: float
    criteria: list[Criterion] = field(default_factory=list)
    paired: PairedComparison | None = None
    champion_model_id: int | None = None
    champion_backtest_id: str | None = None
    reused_folds: int = 0  # the champion side's folds taken from the store
    refit_folds: int = 0
    note: str = ""
    champion_recipe: str = ""  # the champion's recipe (learning.recipes)
    trials: int = 1  # superiority judgements on these folds (gate_ledger), this one included
    alpha_adjusted: float | None = (
        None  # gate.ledger.spend(alpha, trials) for a superiority claim; None: alpha
    )

    @property
    def rule(self) -> str:
        adj = self.alpha if self.alpha_adjusted is None else self.alpha_adjusted
        return RULES[self.evidence].format(
            alpha=f"{self.alpha:g}", alpha_adj=f"{adj:.4g}", trials=self.trials
        )

    def describe(self) -> str:
        out = f"evidence: {self.evidence}"
        if self.champion_model_id is not None and self.evidence == REFRESH:
            # None of the serving model's predictions are used: its recipe's fold weights are.
            out += f" (the same recipe as the serving model {self.champion_model_id}; fold weights, not its predictions)"
        elif self.champion_model_id is not None:
            recipe = f", {self.champion_recipe}" if self.champion_recipe else ""
            out += f" (champion model {self.champion_model_id}{recipe})"
        if self.paired is not None:
            out += f"; {self.paired.describe()}"
        if self.champion_backtest_id:
            out += f"; champion folds reused {self.reused_folds}, refit {self.refit_folds}"
        return out + (f"; {self.note}" if self.note else "")

    def to_dict(self) -> dict:
        return {
            "evidence": self.evidence,
            "decision": self.decision,
            "alpha": self.alpha,
            "rule": self.rule,
            "champion_model_id": self.champion_model_id,
            "champion_backtest_id": self.champion_backtest_id,
            "champion_folds_reused": self.reused_folds,
            "champion_folds_refit": self.refit_folds,
            "champion_recipe": self.champion_recipe,
            "note": self.note,
            "trials": self.trials,
            "alpha_adjusted": self.alpha_adjusted,
            "paired": self.paired.to_dict() if self.paired else None,
        }


def decide(
    evidence: str, paired: PairedComparison, thresholds: GateThresholds, alpha_adjusted: float | None = None
) -> tuple[str, list[Criterion]]:
    """The decision on paired figures (pure): 'pass', 'fail' or 'insufficient evidence', and why.
    `alpha_adjusted`: the level of a recipe change's superiority claim (alpha / trials; default alpha)."""
    a = thresholds.alpha
    a_claim = a if alpha_adjusted is None else alpha_adjusted
    criteria = []
    if evidence == CONFIGS:
        fold_min = min(paired.fold_rows, default=0)
        criteria += [
            Criterion("paired_rows", paired.n, ">=", thresholds.min_rows, paired.n >= thresholds.min_rows),
            Criterion(
                "paired_fold_rows",
                fold_min,
                ">=",
                thresholds.min_fold_rows,
                fold_min >= thresholds.min_fold_rows,
            ),
            Criterion("beats_champion_p", paired.p_better, "<=", a_claim, paired.p_better <= a_claim),
        ]
        insufficient = not (criteria[0].passed and criteria[1].passed)
    else:  # REFRESH: a non-inferiority check, so fewer rows only weaken it; one fold pair is the floor
        criteria += [
            Criterion("paired_folds", len(paired.fold_rows), ">=", 1, len(paired.fold_rows) >= 1),
            Criterion("stale_better_p", paired.p_worse, ">", a, paired.p_worse > a),
        ]
        insufficient = not criteria[0].passed
    if paired.errors:
        # One decision over the horizons (Holm), not one chance to refuse per horizon.
        p = paired.error_worse_p
        criteria.append(Criterion("error_worse_holm_p", p, ">", a, p > a))
    if insufficient:
        return "insufficient evidence", criteria
    return ("pass" if all(c.passed for c in criteria) else "fail"), criteria


def first_deployment(
    skill: SkillTest | None,
    thresholds: GateThresholds,
    hits: int | None = None,
    n: int | None = None,
    trials: int = 1,
) -> Comparison:
    """No active model: beat a coin (binomial test of `hits` of `n` vs 1/2) and always-up (McNemar on
    `skill`'s disagreements), each at p <= gate.ledger.spend(alpha, trials). Without `hits` only always-up is tested (the
    issue-21 rule, kept for callers that have no counts); without either, the absolute criteria decide."""
    a = thresholds.alpha
    adj = gate_ledger.spend(a, trials)
    if skill is None and hits is None:
        return Comparison(
            ABSOLUTE,
            "pass",
            a,
            note="no active model, and the backtest predates the discordant counts: always-up not tested",
        )
    criteria, notes = [], []
    if hits is not None and n:
        p_coin = float(binomtest(int(hits), int(n), 0.5, alternative="greater").pvalue)
        criteria.append(Criterion("beats_coin_p", p_coin, "<=", adj, p_coin <= adj))
        notes.append(
            f"right on {int(hits)} of {int(n)} rows, p (better than a coin) = {format_p_value(p_coin)}"
        )
    if skill is not None:
        p_up = mcnemar_p(skill.model_only, skill.up_only)
        criteria.append(Criterion("beats_always_up_p", p_up, "<=", adj, p_up <= adj))
        notes.append(
            f"the candidate right on {skill.model_only} vs always-up on {skill.up_only} of "
            f"{skill.discordant} disagreements, p (better than always-up) = {format_p_value(p_up)}"
        )
    else:
        notes.append("always-up not tested (the backtest predates the discordant counts)")
    return Comparison(
        FIRST,
        "pass" if all(c.passed for c in criteria) else "fail",
        a,
        criteria,
        note="; ".join(notes),
        trials=max(int(trials), 1),
        alpha_adjusted=adj,
    )


def judge(
    engine: Engine,
    settings: Settings,
    candidate: ModelRecord,
    folds: list[dict],
    skill: SkillTest | None,
    thresholds: GateThresholds,
    hits: int | None = None,
    n: int | None = None,
    trials: int = 1,
) -> Comparison:
    """The paired evidence for `candidate`, whose backtest `folds` (backtest_folds rows) met the bar.
    `hits` of `n`: its pooled next-day hits (a first deployment's test against a coin); `trials`: the
    superiority judgements on these folds (`gate.ledger`), which set a superiority claim's level."""
    champion = active_model(engine, candidate.ticker)
    if champion is None:
        return first_deployment(skill, thresholds, hits, n, trials)
    if any(not f.get("fold_key") for f in folds):
        # Nothing to pair with the champion: not evidence that the candidate is better, so it stays.
        return Comparison(
            ABSOLUTE,
            "insufficient evidence",
            thresholds.alpha,
            champion_model_id=champion.id,
            note="the backtest predates stored per-row predictions (revision 0022): it cannot be paired "
            "with the champion, which stays; backtest the candidate again for the paired comparison",
        )
    same = champion.recipe_signature == candidate.recipe_signature
    rebased = basis_changed(engine, candidate.ticker, folds)
    if rebased:
        # The stored predictions are on the price basis of the backtest; today's rows are not.
        return Comparison(
            REFRESH if same else CONFIGS,
            "insufficient evidence",
            thresholds.alpha,
            [Criterion("price_basis_unchanged", rebased, "==", "none", False)],
            champion_model_id=champion.id,
            note=f"{rebased} was recorded after this backtest: its stored predictions and today's prices "
            f"are on different bases, so they are not paired; backtest {candidate.ticker} again",
        )
    if not same:
        out = _configs(engine, settings, candidate, champion, folds, thresholds, trials)
    else:
        out = _refresh(engine, settings, candidate, champion, folds, thresholds)
    out.champion_recipe = champion.recipe
    return out


def basis_changed(engine: Engine, ticker: str, folds: list[dict]) -> str | None:
    """A corporate action of `ticker` recorded after the backtest was written, with an ex-date within
    its prices: it changes the basis of every price before it. Returns its description, or None."""
    written = [f.get("created_at") for f in folds if f.get("created_at") is not None]
    end = folds[0].get("data_end") if folds else None
    if not written:
        return None
    stmt = select(corporate_actions).where(
        corporate_actions.c.ticker == ticker, corporate_actions.c.recorded_at > min(written)
    )
    if end is not None:
        stmt = stmt.where(corporate_actions.c.ex_date <= end)
    with engine.connect() as conn:
        row = conn.execute(stmt.order_by(corporate_actions.c.ex_date).limit(1)).mappings().first()
    if row is None:
        return None
    return f"a {row['kind']} (factor {row['factor']:g}, ex-date {row['ex_date']})"


# --- the rows both sides are scored on ----------------------------------------------------------


def _samples(engine: Engine, ticker: str, cfg: ModelConfig, end) -> SampleSet:
    prices, feats = prices_and_features(engine, ticker, end=end, features=cfg.features)
    return build_samples(prices, cfg.window, features=feats.frame, names=cfg.features)


def answer_samples(engine: Engine, rec: ModelRecord, end) -> SampleSet:
    """Model `rec`'s ticker's closes and answers up to `end`, one sample per session its rows can be on."""
    return _samples(engine, rec.ticker, _pairing_config(rec), end)


def _pairing_config(*records: ModelRecord) -> ModelConfig:
    """The config whose samples give the paired rows' closes and answers: the first LSTM's among
    `records`, else the reference profile's (a global recipe reads no window; only the dates matter)."""
    for rec in records:
        if rec.recipe == LSTM:
            return rec.config
    return get_profile("reference")


def rows_at(samples: SampleSet, dates: np.ndarray) -> np.ndarray:
    pos = np.searchsorted(samples.dates, dates)
    if np.any(pos >= len(samples)) or np.any(samples.dates[np.minimum(pos, len(samples) - 1)] != dates):
        raise InputError("a fold's test dates are not among the ticker's sessions: backtest again")
    return pos


def _pair(
    samples: SampleSet,
    parts: list[tuple[int, np.ndarray, np.ndarray, np.ndarray]],
    labels: tuple[str, str],
    error_margin: float,
) -> PairedComparison:
    """`parts`: (fold, dates, challenger [n, H], champion [n, H]) of the rows both sides predicted;
    `error_margin`: the |error| tests' practical margin (GateThresholds.error_margin)."""
    fold = np.concatenate([np.full(len(d), k) for k, d, _, _ in parts]) if parts else np.zeros(0, int)
    idx = rows_at(samples, np.concatenate([d for _, d, _, _ in parts])) if parts else np.zeros(0, int)
    empty = np.zeros((0, len(HORIZONS)))
    return compare(
        np.concatenate([a for *_, a, _ in parts]) if parts else empty,
        np.concatenate([b for *_, b in parts]) if parts else empty,
        samples.target_close[idx],
        samples.close[idx],
        baselines.calls(samples.close, samples.prev_close, idx),
        fold,
        labels,
        error_margin,
    )


def _warm(engine: Engine, folds: list[dict]) -> bool:
    """Was the candidate's backtest warm-chained (fold 2 started from fold 1's weights)?"""
    if len(folds) < 2:
        return DEFAULT_WARM_START
    with engine.connect() as conn:
        parent = conn.execute(
            select(backtest_fold_results.c.parent_key).where(
                backtest_fold_results.c.fold_key == folds[1]["fold_key"]
            )
        ).scalar()
    return parent == folds[0]["fold_key"]


def champion_backtest(
    engine: Engine,
    settings: Settings,
    ticker: str,
    champion: ModelRecord,
    folds: int,
    max_fold_rows: int,
    warm_start: bool,
    end: dt.date | None,
    **kw,
):
    """The champion's config backtested on the candidate's folds: the same fold count, cutoffs and test
    rows (`max_fold_rows` reproduces them: each fold tests min(its quarter, test_sessions)), the same
    chain and prices, so the stored folds' keys match and a second call refits nothing. A global
    recipe's champion is backtested as its whole fit (`recipes.global_backtest`): its folds fit on its
    panel, not on this ticker alone."""
    if champion.recipe != LSTM:
        return global_backtest.backtest_ticker(
            engine, settings, champion, folds, max_fold_rows, end, reuse=kw.get("reuse")
        )
    return run_backtest(
        engine,
        settings,
        ticker,
        champion.config,
        folds=folds,
        model_id=champion.id,
        test_sessions=max_fold_rows,
        warm_start=warm_start,
        end=end,
        **kw,
    )


def prepare_champion(engine: Engine, settings: Settings, candidate: ModelRecord, result, **kw):
    """Right after the candidate's backtest (in the backtest phase, within the slot plan): when the
    champion runs another recipe, backtest its config on the same folds so the gate's side reuses them.
    Returns that backtest, or None when there is nothing to pair (no champion, same recipe)."""
    champion = active_model(engine, candidate.ticker)
    if champion is None or champion.recipe_signature == result.config_signature or not result.folds:
        return None
    return champion_backtest(
        engine,
        settings,
        candidate.ticker,
        champion,
        len(result.folds),
        max(f.scores.n for f in result.folds),
        result.folds[-1].fit.warm_start,
        result.data_end,
        **kw,
    )


def _configs(engine, settings, candidate, champion, folds, thresholds, trials: int = 1) -> Comparison:
    trials = max(int(trials), 1)
    out = Comparison(
        CONFIGS,
        "insufficient evidence",
        thresholds.alpha,
        champion_model_id=champion.id,
        trials=trials,
        alpha_adjusted=gate_ledger.spend(thresholds.alpha, trials),
    )
    try:
        shared = paired_folds(engine, settings, candidate, champion, folds)
    except (InputError, NotFoundError) as exc:
        out.note = f"the champion's config could not be backtested on the same folds: {exc}"
        out.criteria = [Criterion("paired_rows", 0, ">=", thresholds.min_rows, False)]
        return out
    champ = shared.champion
    out.champion_backtest_id = champ.backtest_id
    out.reused_folds, out.refit_folds = champ.reused_folds, champ.refit_folds
    out.paired = _pair(shared.samples, shared.parts, ("candidate", "champion"), thresholds.error_margin)
    out.decision, out.criteria = decide(CONFIGS, out.paired, thresholds, out.alpha_adjusted)
    return out


@dataclass
class PairedFolds:
    """The candidate's and the champion's predictions on the rows both predicted, fold by fold."""

    champion: object  # the champion's BacktestResult on the candidate's folds
    parts: list[tuple[int, np.ndarray, np.ndarray, np.ndarray]]  # (fold, dates, candidate, champion)
    samples: SampleSet  # the ticker's closes and answers on those dates


def paired_folds(
    engine, settings, candidate: ModelRecord, champion: ModelRecord, folds: list[dict]
) -> PairedFolds:
    """The champion's recipe backtested on the candidate's folds (stored folds reused) and the two
    sides' stored predictions paired on (fold, date). Raises InputError/NotFoundError when the
    champion's side cannot be backtested there."""
    end = folds[0].get("data_end")
    champ = champion_backtest(
        engine,
        settings,
        candidate.ticker,
        champion,
        len(folds),
        max(int(f["n"]) for f in folds),
        _warm(engine, folds),
        end,
    )
    theirs = {f.window.cutoff: f for f in champ.folds}
    parts = []
    for f in folds:
        other = theirs.get(_date(f["cutoff"]))
        if other is None:
            continue
        d1, p1 = fold_cache.stored_predictions(engine, f["fold_key"])
        d2, p2 = fold_cache.stored_predictions(engine, other.fit.fold_key)
        common, i1, i2 = np.intersect1d(d1, d2, return_indices=True)
        if len(common):
            parts.append((int(f["fold"]), common, p1[i1], p2[i2]))
    samples = _samples(engine, candidate.ticker, _pairing_config(candidate, champion), end)
    return PairedFolds(champ, parts, samples)


def _refresh(engine, settings, candidate, champion, folds, thresholds) -> Comparison:
    out = Comparison(REFRESH, "insufficient evidence", thresholds.alpha, champion_model_id=champion.id)
    end = folds[0].get("data_end")
    samples = _samples(engine, candidate.ticker, _pairing_config(candidate), end)
    parts, missing = [], []
    for prev, f in zip(folds, folds[1:], strict=False):
        if candidate.recipe != LSTM:
            # A global recipe's fold stores the previous fold's fit's predictions on its rows.
            stale = global_backtest.stale_predictions(engine, f["fold_key"])
            if stale is None:
                missing.append(str(prev["fold"]))
            else:
                parts.append((int(f["fold"]), *stale))
            continue
        stale = fold_cache.load(engine, settings, prev["fold_key"])
        stored = fold_cache.stored_predictions(engine, f["fold_key"])
        if stale is None or stale.weights is None or stored is None:
            missing.append(str(prev["fold"]))
            continue
        dates, refreshed = stored
        model = LDTM(candidate.config)
        model.load_state_dict(fold_cache.load_weights(stale.weights))
        model.eval()
        with torch.no_grad():
            old = predict_prices(model, samples.subset(rows_at(samples, dates)))
        parts.append((int(f["fold"]), dates, refreshed, old))
    out.paired = _pair(samples, parts, ("refreshed", "stale"), thresholds.error_margin)
    out.decision, out.criteria = decide(REFRESH, out.paired, thresholds)
    if missing:
        out.note = f"fold(s) {', '.join(missing)}: stored weights missing, left out (backtest with --no-reuse to refit)"
    return out


def _date(value) -> dt.date:
    return value if isinstance(value, dt.date) and not isinstance(value, dt.datetime) else value.date()
