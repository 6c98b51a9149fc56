"""Backtesting many tickers' newest candidates at once, one worker process per slot (like training).

A backtest is `folds` trainings, so over many tickers it is the weekly loop's heaviest phase: it
runs within the slot plan exactly as training does (`ticker_pool`), never as threads of one process.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from sqlalchemy.engine import Engine

from ldtm_core.accountability.gate.champion_challenger import prepare_champion
from ldtm_core.config import Settings, mask_secrets
from ldtm_core.data.universe import validate_ticker
from ldtm_core.errors import InputError, LDTMError
from ldtm_core.learning.backtest import DEFAULT_FOLDS, DEFAULT_WARM_START, BacktestResult, run_backtest
from ldtm_core.learning.gpu_slots import SlotPlan
from ldtm_core.learning.recipes import LSTM, global_backtest
from ldtm_core.learning.registry import get_model, newest_candidate
from ldtm_core.learning.ticker_pool import map_tickers
from ldtm_core.scoring.board_stats import bh_qvalues


@dataclass
class BacktestOutcome:
    ticker: str
    status: str  # 'ok' | 'no candidate' | 'failed'
    result: BacktestResult | None = None
    reason: str = ""
    champion: BacktestResult | None = None  # the champion's config on the same folds (another recipe)

    def row(self) -> dict:
        """One summary row (CLI table, Dagster metadata)."""
        r = self.result
        if r is None:
            return {"ticker": self.ticker, "status": self.status, "reason": self.reason}
        return {
            "ticker": self.ticker,
            "status": self.status,
            "backtest_id": r.backtest_id,
            "model_id": r.model_id,
            "folds": len(r.folds),
            "n": r.n,
            "direction_accuracy": r.direction_accuracy,
            "always_up_accuracy": r.always_up_accuracy,
            "skill_model_only": r.skill.model_only,
            "skill_up_only": r.skill.up_only,
            "skill_p_value": r.skill.p_value,
            "mean_abs_pct_error": r.mean_abs_pct_error,
            "leakage_rows": r.leakage_rows,
            "folds_reused": r.reused_folds,
            "folds_refit": r.refit_folds,
            "champion_folds_refit": self.champion.refit_folds if self.champion else None,
            "covered_live": r.live_note,
            "duration_s": round(r.duration_s, 2),
            "features": r.features,
            **({"reason": self.reason} if self.reason else {}),
        }


def backtest_q_values(outcomes: list[BacktestOutcome]) -> dict[str, float]:
    """{ticker: Benjamini-Hochberg q of its "beats always-up" p over every ticker with one}: read across
    the universe, 103 p-values at 0.05 show ~5 coin-flip models as skilled; the q controls the share
    of false ones among those shown."""
    tested = [(o.ticker, o.result.skill.p_value) for o in outcomes if o.result is not None and o.result.skill]
    q = bh_qvalues([p for _, p in tested])
    return {t: float(v) for (t, _), v in zip(tested, q, strict=True)}


def backtest_model(
    engine: Engine,
    settings: Settings,
    ticker: str,
    folds: int = DEFAULT_FOLDS,
    model_id: int | None = None,
    test_sessions: int | None = None,
    **kw,
) -> BacktestResult:
    """The backtest of model `model_id` (default: the ticker's newest candidate) by its recipe: the
    per-ticker LSTM's walk-forward (`run_backtest`, `kw` its options), or a global recipe's fit on its
    whole panel with this ticker's folds written (`recipes.global_backtest`)."""
    rec = get_model(engine, model_id) if model_id is not None else newest_candidate(engine, ticker)
    if rec is not None and rec.ticker == ticker and rec.recipe != LSTM:
        end, reuse = kw.get("end"), kw.get("reuse")
        return global_backtest.backtest_ticker(engine, settings, rec, folds, test_sessions, end, reuse)
    return run_backtest(
        engine, settings, ticker, folds=folds, model_id=model_id, test_sessions=test_sessions, **kw
    )


def backtest_candidate(
    engine: Engine,
    ticker: str,
    device: str | None,
    threads: int,
    *,
    settings: Settings,
    folds: int = DEFAULT_FOLDS,
    warm_start: bool = DEFAULT_WARM_START,
    reuse: bool | None = None,
    end: dt.date | None = None,
    recipe: str | None = None,
) -> BacktestOutcome:
    """Backtest `ticker`'s newest candidate (of `recipe`, when named) with its own config; a core error
    becomes a failed outcome (one bad ticker never stops the others), anything else propagates."""
    candidate = newest_candidate(engine, ticker, recipe)
    if candidate is None:
        return BacktestOutcome(ticker, "no candidate", reason=f"none of recipe {recipe}" if recipe else "")
    try:
        result = backtest_model(
            engine,
            settings,
            ticker,
            folds=folds,
            model_id=candidate.id,
            device=device,
            threads=threads,
            warm_start=warm_start,
            reuse=reuse,
            end=end,
        )
    except LDTMError as exc:
        return BacktestOutcome(ticker, "failed", reason=mask_secrets(str(exc), settings.database_url))
    return _with_champion(engine, settings, candidate, result, device=device, threads=threads, reuse=reuse)


def _with_champion(engine, settings: Settings, candidate, result: BacktestResult, **kw) -> BacktestOutcome:
    """The candidate's outcome, its champion's side backtested on the same folds. The gate pairs the two
    on these folds: the champion's side is fitted here, within the slot plan, so the gate (one process,
    one thread) only reads stored folds."""
    try:
        champion = prepare_champion(engine, settings, candidate, result, **kw)
    except LDTMError as exc:  # the gate tries again and reports why it cannot pair
        why = mask_secrets(str(exc), settings.database_url)
        return BacktestOutcome(
            candidate.ticker, "ok", result, reason=f"champion's config not backtested on these folds: {why}"
        )
    return BacktestOutcome(candidate.ticker, "ok", result, champion=champion)


def _global_fits(
    settings: Settings,
    tickers: list[str],
    folds: int,
    reuse: bool | None,
    end: dt.date | None,
    recipe: str | None = None,
) -> dict[str, BacktestOutcome]:
    """The tickers whose newest candidate is a global recipe's, each fit backtested once for all of its
    tickers here (its folds are one fit each for the whole panel): {ticker: outcome}."""
    from ldtm_core.db import get_engine

    engine = get_engine(settings.database_url)
    fits: dict[str, list] = {}
    for t in tickers:
        rec = newest_candidate(engine, t, recipe)
        if rec is not None and rec.recipe != LSTM:
            fits.setdefault(rec.checkpoint_path, []).append(rec)
    out = {}
    with global_backtest.shared_panels():
        for recs in fits.values():
            names = [r.ticker for r in recs]
            try:
                fit = global_backtest.backtest_fit(
                    engine, settings, recs[0].id, folds, end=end, reuse=reuse, only=names
                )
            except Exception as exc:  # noqa: BLE001 - a recipe that fails fails its own tickers, by name
                why = str(exc) if isinstance(exc, LDTMError) else f"{type(exc).__name__}: {exc}"
                reason = mask_secrets(f"recipe {recs[0].recipe}: {why}", settings.database_url)
                out.update({r.ticker: BacktestOutcome(r.ticker, "failed", reason=reason) for r in recs})
                continue
            for r in recs:
                if r.ticker in fit.results:
                    out[r.ticker] = _with_champion(engine, settings, r, fit.results[r.ticker], reuse=reuse)
                else:
                    out[r.ticker] = BacktestOutcome(r.ticker, "failed", reason=fit.skipped.get(r.ticker, ""))
    return out


def backtest_many(
    settings: Settings,
    tickers: list[str],
    folds: int = DEFAULT_FOLDS,
    plan: SlotPlan | None = None,
    max_workers: int | None = None,
    warm_start: bool = DEFAULT_WARM_START,
    reuse: bool | None = None,
    on_outcome: Callable[[BacktestOutcome], None] | None = None,
    end: dt.date | None = None,
    recipe: str | None = None,
) -> list[BacktestOutcome]:
    """Backtest every ticker's newest candidate (of `recipe`, when named) within the slot plan; outcomes
    in the order given. `end`: read prices up to that day only (folds that stop before a replay window)."""
    if folds < 1:
        raise InputError(f"folds must be >= 1, not {folds}")
    tickers = [validate_ticker(t) for t in tickers]
    done = _global_fits(settings, tickers, folds, reuse, end, recipe)
    for o in done.values():
        (on_outcome or (lambda _o: None))(o)
    work = partial(
        backtest_candidate,
        settings=settings,
        folds=folds,
        warm_start=warm_start,
        reuse=reuse,
        end=end,
        recipe=recipe,
    )
    rest = map_tickers(
        settings,
        [t for t in tickers if t not in done],
        work,
        failed=lambda ticker, reason: BacktestOutcome(ticker, "failed", reason=reason),
        plan=plan,
        max_workers=max_workers,
        on_outcome=on_outcome,
    )
    found = {**done, **{o.ticker: o for o in rest}}
    return [found[t] for t in tickers]
