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

Evidence judged once: the evidence of a backtest is what its folds consumed, read from their stored
outcomes (`backtest_fold_results`: each fold's cutoff, fingerprint of its exact rows, seed, and start:
cold, warm from the fold before it, or planted weights), so next week's retrain of the same recipe on the
same quarters has the same evidence. It is not the folds' keys: those also name what computed them (the
learning code, torch, device, precision), so a code edit or an upgrade that re-rolls every key would
make an already-judged recipe a new try on the same rows. A fold without a stored outcome (hand-made
rows) counts by its key, and folds without keys (before revision 0022) by their backtest. Rows written
before evidence was read this way (keyed by the fold keys) are read the same way, from their backtest's
folds, so tries judged before an upgrade keep counting. A (recipe, evidence) pair already in the ledger
is not judged again (decision "insufficient evidence": no new evidence, the champion stays) unless
forced. The flip side: the same recipe refitted by changed learning code on the same rows is the same
trial, re-judged only when forced.
Refresh judgements (stale vs refreshed, a non-inferiority check) are recorded but not counted: refusing
a refresh is the claim there, and a smaller alpha would only make it easier to pass.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import math
from dataclasses import dataclass

from sqlalchemy import Connection, Engine, insert, select

from ldtm_core.schema import backtest_fold_results, backtest_folds, gate_trials

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
    # sha256 of what the folds consumed (`_fold_token`), or of the backtest id for folds without keys
    key: str
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


def evidence_of(engine: Engine, backtest_id: str, folds: list[dict]) -> Evidence:
    """The evidence of backtest `backtest_id` whose fold rows (backtest_folds) are `folds`."""
    cutoffs = tuple(sorted({str(f["cutoff"])[:10] for f in folds}))
    keys = [f.get("fold_key") for f in folds]
    with engine.connect() as conn:
        key = _evidence_key(backtest_id, keys, _outcomes(conn, [k for k in keys if k]))
    return Evidence(key, cutoffs, bool(folds) and all(keys))


def _outcomes(conn: Connection, keys: list[str]) -> dict:
    """{fold key: its stored outcome's (data_fingerprint, cutoff, seed, parent_key)} of those stored."""
    if not keys:
        return {}
    t = backtest_fold_results.c
    stmt = select(t.fold_key, t.data_fingerprint, t.cutoff, t.seed, t.parent_key).where(
        t.fold_key.in_(sorted(set(keys)))
    )
    return {r.fold_key: r for r in conn.execute(stmt)}


def _fold_token(key: str, outcome, keys: set[str]) -> str:
    """What one fold consumed, not what computed it: its cutoff, the fingerprint of its rows, its seed and
    its start (cold, warm from a fold of the same backtest, or planted weights by their digest). Without a
    stored outcome, its key."""
    if outcome is None:
        return key
    parent = outcome.parent_key
    start = "cold" if parent is None else ("warm" if parent in keys else parent)
    parts = [str(outcome.cutoff)[:10], outcome.data_fingerprint, int(outcome.seed), start]
    return "rows:" + hashlib.sha256(json.dumps(parts).encode()).hexdigest()


def _evidence_key(backtest_id: str, keys: list[str | None], outcomes: dict) -> str:
    if keys and all(keys):
        tokens = sorted(_fold_token(k, outcomes.get(k), set(keys)) for k in keys)
        return hashlib.sha256("|".join(tokens).encode()).hexdigest()
    return hashlib.sha256(f"backtest:{backtest_id}".encode()).hexdigest()


def _identities(conn: Connection, rows: list[dict]) -> list[str]:
    """Each ledger row's evidence as `evidence_of` reads it today, from the folds of the backtest it
    judged: a row recorded when evidence was the fold keys is thereby the same evidence as the same rows
    re-keyed since. A row whose backtest has no fold rows keeps its stored key."""
    ids = sorted({r["backtest_id"] for r in rows})
    folds: dict[str, list[str | None]] = {}
    if ids:
        t = backtest_folds.c
        stmt = select(t.backtest_id, t.fold_key).where(t.backtest_id.in_(ids)).order_by(t.fold)
        for r in conn.execute(stmt):
            folds.setdefault(r.backtest_id, []).append(r.fold_key)
    outcomes = _outcomes(conn, [k for keys in folds.values() for k in keys if k])
    return [
        _evidence_key(r["backtest_id"], folds[r["backtest_id"]], outcomes)
        if r["backtest_id"] in folds
        else r["evidence_key"]
        for r in rows
    ]


def _rows(conn: Connection, ticker: str, signature: str | None = None) -> list[dict]:
    """The ledger rows of `ticker` (of one recipe with `signature`), oldest first."""
    stmt = select(gate_trials).where(gate_trials.c.ticker == ticker).order_by(gate_trials.c.id)
    if signature is not None:
        stmt = stmt.where(gate_trials.c.config_signature == signature)
    return [dict(r) for r in conn.execute(stmt).mappings()]


def trials(engine: Engine, ticker: str, signature: str, evidence: Evidence, alpha: float) -> Trials:
    """The count of superiority judgements on folds overlapping `evidence` (this one included, once)."""
    mine = set(evidence.cutoffs)
    with engine.connect() as conn:
        rows = _rows(conn, ticker)
        identity = _identities(conn, rows)
    previous = next(
        (
            r
            for r, e in zip(rows, identity, strict=True)
            if r["config_signature"] == signature and e == evidence.key
        ),
        None,
    )
    seen = {
        (r["config_signature"], e)
        for r, e in zip(rows, identity, strict=True)
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
    the same (recipe, evidence) is already there, however its folds were keyed (a forced re-judgement
    counts once)."""
    if evidence.key in _identities(conn, _rows(conn, ticker, signature)):
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
    with engine.connect() as conn:
        return _rows(conn, ticker)
