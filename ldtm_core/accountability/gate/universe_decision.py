"""The decision on a global recipe: one universe verdict, applied to its member tickers (the policy).

A per-ticker recipe (the LSTM) is judged ticker by ticker (`gate.run_gate`). A global recipe is one fit
for the whole universe, so whether it should serve is one question, asked once over every (ticker,
evening) it was backtested on, with the error clustered by evening (`universe.clustered`) and the level
spent from the universe trials ledger:
- tickers with a champion: the candidate against the champions on the same folds (`universe_verdict`);
- tickers without one (a first deployment): the candidate against every gate baseline on its own
  backtest rows; better only when better than each one (an intersection-union test: each comparison at
  the full level, no adjustment for their number, and the family errs at most at that level).
The verdict then decides each member ticker's gate (`run_gate(universe=...)`): better promotes every
member's candidate, anything else keeps what serves; each report shows the ticker's own figures beside
it and cites the verdict. A ticker whose folds leak fails whatever the verdict says.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from sqlalchemy import Engine

from ldtm_core.accountability.gate import champion_challenger as cc
from ldtm_core.accountability.gate import ledger as gate_ledger
from ldtm_core.accountability.gate.gate import AlreadyJudgedError, GateReport, newest_backtest, run_gate
from ldtm_core.accountability.gate.policy import GateThresholds
from ldtm_core.accountability.gate.universe import (
    BETTER,
    INSUFFICIENT,
    MIN_EVENINGS,
    NOT_SHOWN,
    Figures,
    UniverseVerdict,
    clustered,
    record_verdict,
    trials_on,
    universe_verdict,
)
from ldtm_core.config import Settings
from ldtm_core.errors import InputError, NotFoundError
from ldtm_core.learning import fold_cache
from ldtm_core.learning.recipes import get
from ldtm_core.learning.registry import active_model, newest_candidate
from ldtm_core.scoring import baselines

CHAMPIONS, BASELINES = "champions", "baselines"  # the two groups of member tickers


@dataclass
class UniverseDecision:
    """The verdicts on recipe `recipe` (by group) and each member ticker's gate report under them."""

    recipe: str
    verdicts: dict[str, UniverseVerdict]
    reports: dict[str, GateReport] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)  # ticker -> why its gate did not run

    @property
    def promoted(self) -> list[str]:
        return sorted(t for t, r in self.reports.items() if r.passed)


def decide(
    engine: Engine,
    settings: Settings,
    recipe: str,
    tickers: list[str],
    thresholds: GateThresholds | None = None,
    record: bool = True,
) -> UniverseDecision:
    """Judge global recipe `recipe`'s newest candidates of `tickers` as one universe (module doc); with
    `record`, the verdicts go to the universe trials ledger and every member's gate decides by them."""
    if get(recipe).scope != "global":
        raise InputError(f"recipe {recipe} is fitted per ticker: its candidates are judged by `ldtm gate`")
    thresholds = (thresholds or GateThresholds.from_env()).validate()
    candidates = {t: c for t in tickers if (c := newest_candidate(engine, t, recipe)) is not None}
    skipped = {t: f"no candidate of recipe {recipe}" for t in tickers if t not in candidates}
    groups = {CHAMPIONS: [], BASELINES: []}
    for t in candidates:
        groups[CHAMPIONS if active_model(engine, t) is not None else BASELINES].append(t)
    verdicts = {}
    if groups[CHAMPIONS]:
        verdicts[CHAMPIONS] = universe_verdict(
            engine, settings, recipe, groups[CHAMPIONS], thresholds.alpha, record=record
        )
    if groups[BASELINES]:
        verdicts[BASELINES] = baseline_verdict(
            engine, settings, recipe, groups[BASELINES], thresholds.alpha, record=record
        )
    out = UniverseDecision(recipe, verdicts, skipped=skipped)
    for name, members in groups.items():
        for t in members:
            verdict = verdicts[name]
            if t in verdict.skipped:
                out.skipped[t] = verdict.skipped[t]
            elif record:
                try:
                    out.reports[t] = run_gate(
                        engine, settings, t, candidates[t].id, thresholds=thresholds, universe=verdict
                    )
                except (AlreadyJudgedError, InputError, NotFoundError) as exc:
                    out.skipped[t] = str(exc)
    return out


def baseline_verdict(
    engine: Engine, settings: Settings, recipe: str, tickers: list[str], alpha: float, record: bool = True
) -> UniverseVerdict:
    """Recipe `recipe`'s newest candidates of `tickers` against every gate baseline on their backtest
    rows, clustered by evening; `figures` are those of the weakest comparison (the largest p)."""
    frames, evidence, skipped = [], [], {}
    for t in tickers:
        rec = newest_candidate(engine, t, recipe)
        found = newest_backtest(engine, rec.id, rec.recipe_signature) if rec else None
        if found is None:
            skipped[t] = "candidate not backtested" if rec else f"no candidate of recipe {recipe}"
            continue
        backtest_id, folds = found
        rows = _baseline_rows(engine, rec, folds)
        if rows.empty:
            skipped[t] = "no decided rows in its backtest"
            continue
        frames.append(rows)
        evidence.append((t, rec.recipe_signature, gate_ledger.evidence_of(engine, backtest_id, folds)))
    paired = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=["evening", "ticker"])
    signed = ["vs baselines", *sorted({s for _, s, _ in evidence})]  # not the same trial as vs champions
    signature = hashlib.sha256(json.dumps(signed).encode()).hexdigest()
    key = hashlib.sha256(json.dumps(sorted((t, e.key) for t, _, e in evidence)).encode()).hexdigest()
    cutoffs = sorted({c for _, _, e in evidence for c in e.cutoffs})
    k = trials_on(engine, signature, key, cutoffs)
    level = gate_ledger.spend(alpha, k)
    right = {
        b.name: paired[b.name].to_numpy(float) if b.name in paired else np.zeros(0)
        for b in baselines.gate_baselines()
    }
    decision, figures = against_every(
        paired["challenger"].to_numpy(bool) if len(paired) else np.zeros(0, bool),
        right,
        paired["evening"].to_numpy(),
        level,
    )
    weakest = _weakest(figures)
    per_ticker = (
        paired.groupby("ticker")
        .agg(rows=("challenger", "size"), challenger_accuracy=("challenger", "mean"))
        .reset_index()
        .assign(champion_recipe="none (first deployment)")
        if len(paired)
        else pd.DataFrame()
    )
    label = baselines.by_name(weakest).label
    beside = ", ".join(
        f"{baselines.by_name(n).label} p = {f.p_value:.3g}"
        for n, f in figures.items()
        if math.isfinite(f.p_value)
    )
    out = UniverseVerdict(
        recipe,
        figures[weakest],
        len(per_ticker),
        k,
        alpha,
        level,
        decision,
        per_ticker,
        skipped,
        note=(
            "a first deployment: against every baseline, better only when better than each"
            + (f" ({beside})" if beside else "")
            + ("" if figures[weakest].evenings >= MIN_EVENINGS else f"; fewer than {MIN_EVENINGS} evenings")
        ),
        against=f"{label}'s",
    )
    if record and decision != INSUFFICIENT:
        out.recorded = record_verdict(engine, out, signature, key, cutoffs)
    return out


def against_every(
    challenger: np.ndarray, bases: dict[str, np.ndarray], evening: np.ndarray, level: float
) -> tuple[str, dict[str, Figures]]:
    """(decision, {baseline: Figures}): the challenger's hits (bool per decided row) against each
    baseline's (1.0 right, 0.0 wrong, NaN no call), clustered by `evening`, each on the rows that baseline
    called; better only when better than every one at `level` (intersection-union), insufficient evidence
    when any comparison is."""
    figures = {}
    for name, right in bases.items():
        called = np.isfinite(right)
        figures[name] = clustered(challenger[called], right[called].astype(bool), evening[called], level)
    if not figures or any(math.isnan(f.p_value) for f in figures.values()):
        return INSUFFICIENT, figures
    return (BETTER if all(f.p_value <= level for f in figures.values()) else NOT_SHOWN), figures


def _weakest(figures: dict[str, Figures]) -> str:
    """The comparison that binds: one with no verdict (NaN p) first, else the largest p."""
    return max(figures, key=lambda n: math.inf if math.isnan(figures[n].p_value) else figures[n].p_value)


def _baseline_rows(engine: Engine, rec, folds: list[dict]) -> pd.DataFrame:
    """One row per decided evening of the candidate's backtest folds: whether its next-day call was right,
    and each gate baseline's (NaN where the baseline makes no call)."""
    samples = cc.answer_samples(engine, rec, folds[0].get("data_end"))
    out = []
    for f in folds:
        dates, pred = fold_cache.stored_predictions(engine, f["fold_key"])
        idx = cc.rows_at(samples, dates)
        close, actual = samples.close[idx], samples.target_close[idx, 0]
        decided = np.isfinite(actual) & (actual != close)
        truth = np.sign(actual - close)
        row = {
            "ticker": rec.ticker,
            "evening": dates[decided],
            "challenger": (np.sign(pred[:, 0] - close) == truth)[decided],
        }
        for b in baselines.gate_baselines():
            call = np.asarray(b.call(samples.close, samples.prev_close, idx), float)
            row[b.name] = np.where(np.isfinite(call), call == truth, np.nan)[decided]
        out.append(pd.DataFrame(row))
    return pd.concat(out, ignore_index=True) if out else pd.DataFrame()
