"""The universe verdict on a recipe change: is recipe B better than what serves now, on this universe?

Each ticker's newest candidate of recipe B is paired with the ticker's champion (whatever its recipe)
on the candidate's backtest folds, exactly as the per-ticker gate pairs them (`champion_challenger.
paired_folds`: the champion's side on the same cutoffs and rows, stored folds reused). The question is
then answered once, over every (ticker, evening) both predicted: the difference in next-day direction
accuracy, challenger minus champion, on the decided rows (a zero move is nobody's).

Why clustered by evening: every ticker shares a market day, so one day's shock moves all tickers' hits
together. Treating 103 tickers x 250 evenings as 25,750 independent rows understates the error; the
standard error here is clustered by evening (statsmodels OLS on a constant, cluster-robust covariance,
t with evenings - 1 degrees of freedom). Next-day hits on different evenings do not overlap.

The claim is one-sided (the challenger is better) at `spend(alpha, k)`, k the universe judgements on
folds overlapping these (the `universe_trials` ledger, counted as the per-ticker trials ledger counts).
The report says the smallest difference it could detect: (t(1 - level) + t(power)) x SE, power 80 %.

The verdict itself promotes nothing: for a global recipe it is the decision, applied to its member
tickers by `universe_decision.decide` (the universe policy; a first deployment is judged there against
the baselines); for the LSTM it is the quant's evidence beside the per-ticker gates.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from scipy.stats import t as student_t
from sqlalchemy import Engine, insert, select

from ldtm_core.accountability.gate import champion_challenger as cc
from ldtm_core.accountability.gate import ledger as gate_ledger
from ldtm_core.accountability.gate.gate import newest_backtest
from ldtm_core.accountability.gate.policy import BETTER, DEFAULT_ALPHA, INSUFFICIENT, NOT_SHOWN  # noqa: F401
from ldtm_core.config import Settings
from ldtm_core.errors import InputError, NotFoundError
from ldtm_core.learning.recipes import get, global_backtest
from ldtm_core.learning.registry import ModelRecord, active_model, newest_candidate
from ldtm_core.schema import universe_trials

POWER = 0.8  # the power at which the smallest detectable difference is stated
MIN_EVENINGS = 20  # fewer clusters than this: the clustered error is itself too noisy to judge on


@dataclass(frozen=True)
class Figures:
    """The clustered comparison of two sides' hits on the same decided rows."""

    rows: int
    evenings: int
    challenger_accuracy: float
    champion_accuracy: float
    difference: float  # challenger minus champion, a fraction
    std_error: float  # clustered by evening
    p_value: float  # one-sided: the challenger is better
    detectable: float  # the smallest difference detectable at the level, with POWER


def clustered(challenger_right, champion_right, evening, level: float) -> Figures:
    """`Figures` of paired hits (booleans, one per decided row) clustered by `evening` (any labels)."""
    import statsmodels.api as sm

    a = np.asarray(challenger_right, dtype=float)
    b = np.asarray(champion_right, dtype=float)
    groups = pd.factorize(np.asarray(evening))[0]
    n, g = len(a), int(groups.max()) + 1 if len(groups) else 0
    nan = math.nan
    if n < 2 or g < MIN_EVENINGS:
        mean = lambda v: float(v.mean()) if len(v) else nan  # noqa: E731
        return Figures(n, g, mean(a), mean(b), mean(a - b), nan, nan, nan)
    d = a - b
    if not np.any(d != d[0]):  # no disagreement at all: nothing to estimate an error from
        return Figures(n, g, float(a.mean()), float(b.mean()), float(d.mean()), 0.0, nan, nan)
    fit = sm.OLS(d, np.ones(n)).fit(cov_type="cluster", cov_kwds={"groups": groups}, use_t=True)
    se = float(fit.bse[0])
    df = g - 1
    p = float(student_t.sf(fit.params[0] / se, df))
    detectable = (student_t.ppf(1 - level, df) + student_t.ppf(POWER, df)) * se
    return Figures(n, g, float(a.mean()), float(b.mean()), float(d.mean()), se, p, float(detectable))


@dataclass
class UniverseVerdict:
    recipe: str
    figures: Figures
    tickers: int
    trials: int
    alpha: float
    alpha_adjusted: float
    decision: str
    per_ticker: pd.DataFrame  # ticker, rows, challenger and champion accuracy, champion recipe
    skipped: dict[str, str] = field(default_factory=dict)
    recorded: bool = False
    note: str = ""
    against: str = "the champions'"  # whose accuracy: or, on a first deployment, a baseline's

    def summary(self) -> str:
        f = self.figures
        pct = lambda v: "n/a" if not math.isfinite(v) else f"{v * 100:.2f}%"  # noqa: E731
        pts = lambda v: "n/a" if not math.isfinite(v) else f"{v * 100:+.2f} points"  # noqa: E731
        p = "n/a" if not math.isfinite(f.p_value) else f"{f.p_value:.3g}"
        return (
            f"universe verdict on recipe {self.recipe}: {self.decision}. Over {self.tickers} ticker(s), "
            f"{f.rows} paired rows on {f.evenings} evenings: next-day accuracy {pct(f.challenger_accuracy)} "
            f"vs {self.against} {pct(f.champion_accuracy)} ({pts(f.difference)}, SE {pct(f.std_error)} "
            f"clustered by evening), one-sided p = {p} at level {self.alpha_adjusted:.4g} (try "
            f"{self.trials} on these folds, alpha {self.alpha:g}); the smallest difference these rows "
            f"could detect with {POWER:.0%} power is {pts(f.detectable)}"
            + (f"; {len(self.skipped)} ticker(s) left out" if self.skipped else "")
            + (f"; {self.note}" if self.note else "")
        )


def _challengers(engine: Engine, recipe: str, tickers: list[str]) -> dict[str, ModelRecord]:
    out = {}
    for t in tickers:  # the newest candidate of this recipe, whatever was fitted since
        rec = newest_candidate(engine, t, recipe)
        if rec is not None:
            out[t] = rec
    return out


def universe_verdict(
    engine: Engine,
    settings: Settings,
    recipe: str,
    tickers: list[str],
    alpha: float = DEFAULT_ALPHA,
    record: bool = True,
) -> UniverseVerdict:
    """Judge recipe `recipe`'s newest candidates against each ticker's champion (module doc); with
    `record`, add the judgement to the universe trials ledger (once per recipe and evidence)."""
    get(recipe)
    challengers = _challengers(engine, recipe, tickers)
    skipped = {t: f"no candidate of recipe {recipe}" for t in tickers if t not in challengers}
    pairs: list[_Paired] = []
    with global_backtest.shared_panels():  # a global champion's panel is read once, not per ticker
        for t, rec in challengers.items():
            found = _pair_one(engine, settings, rec)
            if isinstance(found, str):
                skipped[t] = found
            else:
                pairs.append(found)
    frames = [p.rows for p in pairs]
    paired = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=["evening"])
    signature = hashlib.sha256(json.dumps(sorted({p.signature for p in pairs})).encode()).hexdigest()
    key = hashlib.sha256(json.dumps(sorted((p.ticker, p.evidence.key) for p in pairs)).encode()).hexdigest()
    cutoffs = sorted({c for p in pairs for c in p.evidence.cutoffs})
    per_ticker = [
        {
            "ticker": p.ticker,
            "rows": len(p.rows),
            "challenger_accuracy": p.rows["challenger"].mean(),
            "champion_accuracy": p.rows["champion"].mean(),
            "champion_recipe": p.champion_recipe,
        }
        for p in pairs
    ]
    k = trials_on(engine, signature, key, cutoffs)
    level = gate_ledger.spend(alpha, k)
    figures = clustered(
        paired.get("challenger", []), paired.get("champion", []), paired["evening"].to_numpy(), level
    )
    if not math.isfinite(figures.p_value):
        decision = INSUFFICIENT
    else:
        decision = BETTER if figures.p_value <= level else NOT_SHOWN
    out = UniverseVerdict(
        recipe,
        figures,
        len(per_ticker),
        k,
        alpha,
        level,
        decision,
        pd.DataFrame(per_ticker),
        skipped,
        note="" if figures.evenings >= MIN_EVENINGS else f"fewer than {MIN_EVENINGS} evenings paired",
    )
    if record and decision != INSUFFICIENT:
        out.recorded = record_verdict(engine, out, signature, key, cutoffs)
    return out


@dataclass(frozen=True)
class _Paired:
    """One ticker's candidate and champion on the candidate's folds."""

    ticker: str
    rows: pd.DataFrame  # _rows
    champion_recipe: str
    evidence: gate_ledger.Evidence  # what the candidate's folds consumed
    signature: str  # the candidate's recipe signature


def _pair_one(engine, settings, rec: ModelRecord) -> _Paired | str:
    """Candidate `rec` paired with its ticker's champion, or why it cannot be."""
    t = rec.ticker
    champion = active_model(engine, t)
    found = newest_backtest(engine, rec.id, rec.recipe_signature)
    if champion is None or found is None:
        return "no champion to compare with" if champion is None else "candidate not backtested"
    backtest_id, folds = found
    try:
        shared = cc.paired_folds(engine, settings, rec, champion, folds)
    except (InputError, NotFoundError) as exc:
        return f"champion not backtested on these folds: {exc}"
    rows = _rows(t, shared)
    if rows.empty:
        return "no paired rows"
    evidence = gate_ledger.evidence_of(engine, backtest_id, folds)
    return _Paired(t, rows, champion.recipe, evidence, rec.recipe_signature)


def _rows(ticker: str, shared: cc.PairedFolds) -> pd.DataFrame:
    """One row per decided (evening) both sides predicted: whether each side's next-day call was right."""
    samples, frames = shared.samples, []
    for _, dates, mine, theirs in shared.parts:
        idx = cc.rows_at(samples, dates)
        close, actual = samples.close[idx], samples.target_close[idx, 0]
        decided = actual != close
        truth = np.sign(actual - close)
        frames.append(
            pd.DataFrame(
                {
                    "ticker": ticker,
                    "evening": dates[decided],
                    "challenger": (np.sign(mine[:, 0] - close) == truth)[decided],
                    "champion": (np.sign(theirs[:, 0] - close) == truth)[decided],
                }
            )
        )
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def trials_on(engine: Engine, signature: str, key: str, cutoffs: list[str]) -> int:
    """Distinct (recipe, evidence) universe judgements on folds sharing a cutoff with these, this one
    included once."""
    with engine.connect() as conn:
        rows = conn.execute(
            select(
                universe_trials.c.config_signature, universe_trials.c.evidence_key, universe_trials.c.cutoffs
            )
        ).all()
    mine = set(cutoffs)
    seen = {(s, e) for s, e, c in rows if mine & set(c.split(","))}
    seen.add((signature, key))
    return len(seen)


def record_verdict(engine: Engine, v: UniverseVerdict, signature: str, key: str, cutoffs: list[str]) -> bool:
    """Add the judgement to the ledger; False when this recipe's evidence was judged before."""
    f = v.figures
    finite = lambda x: x if math.isfinite(x) else None  # noqa: E731
    with engine.begin() as conn:
        done = conn.execute(
            select(universe_trials.c.id).where(
                universe_trials.c.config_signature == signature, universe_trials.c.evidence_key == key
            )
        ).first()
        if done is not None:
            return False
        conn.execute(
            insert(universe_trials).values(
                recipe=v.recipe,
                config_signature=signature,
                evidence_key=key,
                cutoffs=",".join(cutoffs),
                tickers=v.tickers,
                rows=f.rows,
                evenings=f.evenings,
                difference=finite(f.difference),
                std_error=finite(f.std_error),
                p_value=finite(f.p_value),
                detectable=finite(f.detectable),
                trials=v.trials,
                alpha_adjusted=v.alpha_adjusted,
                decision=v.decision,
                judged_at=dt.datetime.now(dt.UTC),
            )
        )
    return True
