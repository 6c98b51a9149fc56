"""The trials ledger: every recipe the evidence-policy gate judged on a ticker's folds.

Why: a recipe change (or a first deployment) claims that the candidate is better than something, at
p <= alpha. Trying k recipes or seeds on the same folds and keeping the one that passes is a search: at
k = 5 a coin-vs-coin challenger passes ~14 % of the time, at k = 20 ~45 %. The k-th superiority claim
is therefore judged at `spend(alpha, k)` = alpha * 6 / (pi^2 k^2), k = the number of distinct (recipe,
evidence) judgements of the ticker whose folds share at least one cutoff with this one, this one
included. Those levels sum to at most alpha however many tries are made (sum 1/k^2 = pi^2 / 6), so by
the union bound the whole search errs at most alpha: the first try is judged at 0.61 alpha, the
second at 0.15 alpha, the fifth at 0.024 alpha. (alpha / k, Bonferroni for the k-th try alone, let a
search of k tries err up to alpha * H_k: 9 % at 20 tries.) A recipe re-judged on the next quarter's
folds (two of three folds shared) counts again.

Evidence judged once: the evidence of a backtest is the set of its folds' stored keys (`fold_key`: the
recipe, seed, cutoff, the exact rows and the starting weights), so next week's retrain of the same
recipe on the same quarters has the same key. A (recipe, evidence) pair already in the ledger is not
judged again (decision "insufficient evidence": no new evidence, the champion stays) unless forced.
Refresh judgements (stale vs refreshed, a non-inferiority check) are recorded but not counted: refusing
a refresh is the claim there, and a smaller alpha would only make it easier to pass.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import math
from dataclasses import dataclass

from sqlalchemy import Connection, Engine, insert, select

from ldtm_core.schema import gate_trials

FIRST = "first deployment"
RECIPE = "recipe change"
REFRESH = "refresh"
COUNTED = (FIRST, RECIPE)


def spend(alpha: float, k: int) -> float:
    """The level of the k-th superiority judgement on overlapping folds: alpha * 6 / (pi^2 k^2), whose sum
    over every k is alpha (the family of tries errs at most alpha, however many are made)."""
    return alpha * 6.0 / (math.pi**2 * max(int(k), 1) ** 2)


SPENDING = "alpha spending: the k-th try at alpha * 6 / (pi^2 k^2), so any number of tries errs at most alpha"


@dataclass(frozen=True)
class Evidence:
    key: str  # sha256 of the folds' stored keys (or of the backtest id for folds without them)
    cutoffs: tuple[str, ...]  # ISO dates
    from_fold_keys: bool  # False: folds predating stored keys (revision 0022), keyed by backtest id


@dataclass(frozen=True)
class Trials:
    """What the ledger says about one judgement before it is made."""

    count: int  # superiority judgements on overlapping folds, this one included
    alpha: float
    alpha_adjusted: float  # spend(alpha, count)
    previous: dict | None  # the ledger row of the same (recipe, evidence), when already judged
    recipes: int  # distinct recipes among them

    def describe(self) -> str:
        return (
            f"trials ledger: {self.count} superiority judgement(s) of {self.recipes} recipe(s) on folds "
            f"overlapping these; adjusted alpha = {self.alpha_adjusted:.4g} ({SPENDING})"
        )

    def to_dict(self) -> dict:
        return {
            "trials": self.count,
            "recipes": self.recipes,
            "alpha": self.alpha,
            "alpha_adjusted": self.alpha_adjusted,
            "already_judged": None
            if self.previous is None
            else {
                k: str(v)
                for k, v in self.previous.items()
                if k in ("backtest_id", "model_id", "decision", "judged_at")
            },
        }


def evidence_of(backtest_id: str, folds: list[dict]) -> Evidence:
    cutoffs = tuple(sorted({str(f["cutoff"])[:10] for f in folds}))
    keys = [f.get("fold_key") for f in folds]
    if folds and all(keys):
        return Evidence(hashlib.sha256("|".join(sorted(keys)).encode()).hexdigest(), cutoffs, True)
    return Evidence(hashlib.sha256(f"backtest:{backtest_id}".encode()).hexdigest(), cutoffs, False)


def _rows(engine: Engine, ticker: str) -> list[dict]:
    with engine.connect() as conn:
        return [
            dict(r)
            for r in conn.execute(
                select(gate_trials).where(gate_trials.c.ticker == ticker).order_by(gate_trials.c.id)
            ).mappings()
        ]


def trials(engine: Engine, ticker: str, signature: str, evidence: Evidence, alpha: float) -> Trials:
    """The count of superiority judgements on folds overlapping `evidence` (this one included, once)."""
    mine = set(evidence.cutoffs)
    rows = _rows(engine, ticker)
    previous = next(
        (r for r in rows if r["config_signature"] == signature and r["evidence_key"] == evidence.key), None
    )
    seen = {
        (r["config_signature"], r["evidence_key"])
        for r in rows
        if r["kind"] in COUNTED and mine & set(r["cutoffs"].split(","))
    }
    seen.add((signature, evidence.key))
    count = len(seen)
    return Trials(count, alpha, spend(alpha, count), previous, len({s for s, _ in seen}))


def record(
    conn: Connection,
    *,
    ticker: str,
    signature: str,
    evidence: Evidence,
    kind: str,
    backtest_id: str,
    model_id: int,
    trials_: Trials,
    decision: str,
    at: dt.datetime | None = None,
) -> bool:
    """Add the judgement to the ledger, in the caller's transaction (with the gate decision); False when
    the same (recipe, evidence) is already there (a forced re-judgement counts once)."""
    exists = conn.execute(
        select(gate_trials.c.id).where(
            gate_trials.c.ticker == ticker,
            gate_trials.c.config_signature == signature,
            gate_trials.c.evidence_key == evidence.key,
        )
    ).first()
    if exists is not None:
        return False
    conn.execute(
        insert(gate_trials).values(
            ticker=ticker,
            config_signature=signature,
            evidence_key=evidence.key,
            cutoffs=",".join(evidence.cutoffs),
            kind=kind,
            backtest_id=backtest_id,
            model_id=model_id,
            trials=trials_.count,
            alpha_adjusted=trials_.alpha_adjusted,
            decision=decision,
            judged_at=at or dt.datetime.now(dt.UTC),
        )
    )
    return True


def ledger(engine: Engine, ticker: str) -> list[dict]:
    """Every judgement in the ledger of `ticker`, oldest first (the CLI and reports)."""
    return _rows(engine, ticker)
