"""Walk-forward backtest of a global recipe's fit: one fit per fold for the whole panel, scored per ticker.

The panel is the fit's own: the pool it was fitted on (`global_fit.fit_pool`; for a fit stored before
pools were, every ticker registered on its artifact), and each ticker registered on the artifact is
scored. Folds sit where the per-ticker backtest's do (`fold_calendar`: the
newest completed quarters; a cutoff is the session before its quarter), so a recipe's fold pairs row by
row with an LSTM's fold of the same ticker. Fold k fits on every panel row whose every target date is
on or before its cutoff (the purge) and tests each ticker on its own rows of the quarter.

Each ticker's folds are written as `learning.backtest` writes them (backtest_folds under its model id,
backtest_fold_baselines, and its predictions in the fold store under a fold key), so the gate, its
trials ledger and its paired comparisons read a recipe's backtest as they read an LSTM's. A fold's
stored rows also hold the previous fold's fit's predictions on its rows (`stale_pred`): the gate's
"stale vs refreshed" evidence for a retrain of the same recipe. A fold whose every ticker's key is
stored with an intact artifact is reused, not refitted.
"""

from __future__ import annotations

import datetime as dt
import functools
import hashlib
import json
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from sqlalchemy import Engine, delete, insert, select

from ldtm_core.data import price_features
from ldtm_core.data.membership import load_membership
from ldtm_core.errors import InputError, LDTMError, NotFoundError, summary
from ldtm_core.horizons import HORIZONS
from ldtm_core.learning import fold_cache
from ldtm_core.learning.backtest import (
    DEFAULT_FOLDS,
    BacktestResult,
    FoldFit,
    FoldResult,
    FoldWindow,
    score_rows,
    stored_rows,
    write_folds,
)
from ldtm_core.learning.fold_calendar import FOLD_PERIOD
from ldtm_core.learning.recipes import artifacts, budget, tabular
from ldtm_core.learning.recipes.family import RecipeConfig, config_from, family, inputs_of
from ldtm_core.learning.recipes.global_fit import context_arrays, fit_pool, panel_bars
from ldtm_core.learning.recipes.inputs import with_library
from ldtm_core.learning.registry import ModelRecord, get_model, models_on_artifact
from ldtm_core.schema import backtest_fold_results


@dataclass(frozen=True)
class Panel:
    """Every row (ticker, session) of the fit's tickers, in ticker then date order."""

    tickers: np.ndarray  # str
    days: np.ndarray  # datetime64[D]
    x: np.ndarray  # [rows, features], NaN in warm-up
    y: np.ndarray  # [rows, H] log-return targets, NaN where not yet known
    close: np.ndarray
    prev_close: np.ndarray  # the ticker's previous close (NaN on its first row)
    next_close: np.ndarray  # the ticker's close on the next-day target date (NaN: not known)
    last_target: np.ndarray  # datetime64[D]: the latest target date a row's labels read

    blocks: dict[str, tuple[int, int]]  # each ticker's rows: panel[lo:hi]

    def rows_of(self, ticker: str) -> np.ndarray:
        lo, hi = self.blocks[ticker]
        return np.arange(lo, hi)


def build_panel(
    arrays: dict[str, dict], cfg: RecipeConfig | None = None, context: dict | None = None, engine=None
) -> Panel:
    """The panel of `arrays`' tickers with recipe `cfg`'s inputs (`price_features` without one; with
    `engine`, the library's stored rows where they are current)."""
    from ldtm_core.data.calendar import target_dates

    inputs = inputs_of(cfg)
    bars = with_library(engine, panel_bars(arrays), inputs)
    targets = tabular.panel_targets(bars)
    tickers = bars["ticker"].to_numpy(dtype=str)
    days = pd.to_datetime(bars["date"]).to_numpy().astype("datetime64[D]")
    close = bars["close"].to_numpy(dtype=np.float64)
    same = np.r_[False, tickers[1:] == tickers[:-1]]
    starts = np.flatnonzero(~same)
    prev_close = np.where(same, np.r_[np.nan, close[:-1]], np.nan)
    y = targets[tabular.target_columns()].to_numpy(dtype=np.float64)
    return Panel(
        tickers,
        days,
        inputs.compute(bars, cfg, context or {}),
        y,
        close,
        prev_close,
        close * np.exp(y[:, 0]),
        target_dates(days)[HORIZONS[-1].name],
        {
            t: (int(lo), int(hi))
            for t, lo, hi in zip(tickers[starts], starts, np.r_[starts[1:], len(tickers)], strict=True)
        },
    )


# Panels read within one `shared_panels()` scope (a verdict, a backtest of many tickers): every ticker
# of one fit reads the same panel, so it is read and its features computed once, not once per ticker.
_PANELS: ContextVar[dict | None] = ContextVar("ldtm_recipe_panels", default=None)


@contextmanager
def shared_panels() -> Iterator[None]:
    """Within this scope, a fit's panel is read once (the scope of one command: the prices do not change
    under it in any way its figures could tell)."""
    token = _PANELS.set({}) if _PANELS.get() is None else None
    try:
        yield
    finally:
        if token is not None:
            _PANELS.reset(token)


def _panel_for(
    engine: Engine, tickers: list[str], start: dt.date, stop: dt.date, cfg: RecipeConfig
) -> tuple[Panel, np.ndarray]:
    """(the panel of `tickers`' prices from `start` to `stop` with `cfg`'s inputs, each row's universe
    membership)."""
    from ldtm_core.learning.price_windows import load_price_arrays

    inputs = inputs_of(cfg)
    reads = (inputs.name, inputs.fingerprint(cfg), inputs.names(cfg), inputs.context(cfg))
    cache, key = _PANELS.get(), (str(engine.url), tuple(tickers), start, stop, reads)
    if cache is not None and key in cache:
        return cache[key]
    context = context_arrays(engine, cfg, start, stop)
    panel = build_panel(load_price_arrays(engine, tickers, start, stop), cfg, context, engine)
    found = (panel, load_membership(engine).row_mask(panel.tickers, panel.days))
    if cache is not None:
        cache[key] = found
    return found


@dataclass(frozen=True)
class FoldPlace:
    fold: int
    cutoff: np.datetime64
    test_days: np.ndarray


def fold_places(
    panel: Panel, folds: int, test_sessions: int | None, testable: np.ndarray | None = None
) -> list[FoldPlace]:
    """The folds' cutoffs and test sessions: the `folds` newest completed quarters of sessions with a
    next-day answer (on a `testable` row, when given: a scored ticker's, its inputs known, a member), as
    `fold_calendar.fold_spans` places them for one ticker."""
    sessions = np.unique(panel.days)
    answered = np.isfinite(panel.next_close) & (True if testable is None else testable)
    evaluable = np.unique(panel.days[answered])
    if not len(evaluable):
        raise InputError("no session of the panel has its next-day answer yet: nothing to test")
    periods = pd.PeriodIndex(pd.DatetimeIndex(evaluable), freq=FOLD_PERIOD)
    newest = pd.Period(pd.Timestamp(sessions[-1]), freq=FOLD_PERIOD)
    complete = [p for p in periods.unique() if p < newest and sessions[0] < evaluable[periods == p][0]]
    if len(complete) < folds:
        raise InputError(f"{len(complete)} completed quarter(s) of the panel cannot hold {folds} folds")
    out = []
    for k, p in enumerate(complete[-folds:]):
        days = evaluable[periods == p][: test_sessions or None]
        out.append(FoldPlace(k + 1, sessions[sessions < days[0]][-1], days))
    return out


def runtime(cfg: RecipeConfig) -> fold_cache.Runtime:
    from ldtm_core.learning.recipes.inputs import library_names

    return _runtime(cfg.kind, library_names(cfg) if inputs_of(cfg).library else ())


@functools.lru_cache(maxsize=16)
def _runtime(kind: str, features: tuple[str, ...]) -> fold_cache.Runtime:
    """What does a recipe fit's arithmetic: its libraries' versions and the syntax trees of the recipe
    code (its family's module, the artifact format and the fit around them, and of the `price_features`
    library the code of the `features` it reads: `price_features.code_for`)."""
    import importlib.metadata as md
    import sys

    from ldtm_core.learning.recipes import global_fit

    fam = family(kind)
    libraries = ", ".join(f"{lib} {md.version(lib)}" for lib in fam.libraries)
    code = hashlib.sha256()
    read = sys.modules[fam.inputs.compute.__module__]
    modules = (sys.modules[fam.fit.__module__], tabular, read, artifacts, global_fit)
    for module in dict.fromkeys(modules):
        path = Path(module.__file__)
        code.update(fold_cache.code_digest(path.name, path.read_text()).encode())
    if features:
        library = price_features.code_for(features)
        code.update(fold_cache.code_digest("price_features.py", library).encode())
    return fold_cache.Runtime("float64", "cpu", libraries, code.hexdigest())


def _digest(*arrays: np.ndarray) -> str:
    h = hashlib.sha256()
    for arr in arrays:
        a = np.ascontiguousarray(arr.astype(str) if arr.dtype == object else arr)
        h.update(f"{a.dtype}{a.shape}".encode())
        h.update(a.tobytes())
    return h.hexdigest()


@dataclass
class _Fold:
    place: FoldPlace
    train: np.ndarray
    tests: dict[str, np.ndarray]  # ticker -> panel rows tested
    keys: dict[str, str]
    fingerprints: dict[str, str]


def _plan(panel: Panel, place: FoldPlace, members: np.ndarray, sig: str, cfg, rt) -> _Fold:
    known = np.isfinite(panel.x).all(axis=1)
    complete = known & np.isfinite(panel.y).all(axis=1)
    train = np.flatnonzero(complete & (panel.last_target <= place.cutoff))
    if len(train) < 2:
        raise InputError(f"fold {place.fold} (cutoff {place.cutoff}): {len(train)} training rows")
    testable = known & np.isfinite(panel.next_close) & members & np.isin(panel.days, place.test_days)
    train_digest = _digest(panel.tickers[train], panel.days[train], panel.x[train], panel.y[train])
    tests, keys, prints = {}, {}, {}
    for t, (lo, hi) in panel.blocks.items():
        rows = lo + np.flatnonzero(testable[lo:hi])
        if not len(rows):
            continue
        tests[t] = rows
        test = (panel.days[rows], panel.x[rows], panel.close[rows], panel.next_close[rows])
        prints[t] = _digest(np.frombuffer(train_digest.encode(), np.uint8), *test)
        keys[t] = fold_cache.fold_key(sig, prints[t], pd.Timestamp(place.cutoff).date(), cfg.seed, None, rt)
    return _Fold(place, train, tests, keys, prints)


def _plans(
    panel, members, scored: list[str], sig: str, cfg, rt, folds: int, test_sessions: int | None, read
) -> list[_Fold]:
    """Every fold's plan (within a `shared_panels()` scope, made once per fit and fold geometry). Folds
    sit on quarters where a `scored` ticker has a testable row: a pool ticker's rows alone (a late
    listing still in warm-up) place none."""
    cache, key = _PANELS.get(), ("plans", *read, tuple(scored), sig, folds, test_sessions)
    if cache is not None and key in cache:
        return cache[key]
    testable = np.isfinite(panel.x).all(axis=1) & members & np.isin(panel.tickers, scored)
    places = fold_places(panel, folds, test_sessions, testable)
    plans = [_plan(panel, p, members, sig, cfg, rt) for p in places]
    if cache is not None:
        cache[key] = plans
    return plans


def _stored(engine: Engine, keys: list[str]) -> dict[str, dict]:
    t = backtest_fold_results.c
    with engine.connect() as conn:
        rows = conn.execute(select(t.fold_key, t.result_json).where(t.fold_key.in_(keys))).all()
    return {k: json.loads(r) for k, r in rows}


def stale_predictions(engine: Engine, key: str) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """(test dates, [n, H] refreshed predictions, [n, H] the previous fold's fit's) of a recipe's fold
    stored under `key`; None when the fold has no previous fit's predictions (fold 1, or not a recipe's)."""
    stored = _stored(engine, [key]).get(key)
    if stored is None or "stale_pred" not in stored:
        return None
    dates = np.asarray(stored["dates"], dtype="datetime64[D]")
    return dates, np.asarray(stored["pred"], float), np.asarray(stored["stale_pred"], float)


def _artifact(settings, stored: dict) -> Path | None:
    """The fold's artifact when it verifies (one file serves every ticker of the fold: checked once per
    `shared_panels()` scope)."""
    cache, key = _PANELS.get(), ("artifact", stored["weights_file"], stored["weights_sha256"])
    if cache is not None and key in cache:
        return cache[key]
    path = fold_cache.weights_dir(settings) / stored["weights_file"]
    found = path if fold_cache.verifies(path, stored["weights_sha256"]) else None
    if cache is not None and found is not None:
        cache[key] = found
    return found


def _prices(model, panel: Panel, rows: np.ndarray) -> np.ndarray:
    return panel.close[rows, None] * np.exp(model.predict(panel.x[rows]))


@dataclass
class RecipeBacktest:
    """One backtest of a global fit: each ticker's BacktestResult (written), and what was skipped."""

    recipe: str
    results: dict[str, BacktestResult]
    skipped: dict[str, str]
    refit_folds: int
    reused_folds: int
    duration_s: float


def fit_records(engine: Engine, model_id: int) -> list[ModelRecord]:
    """Every registry row on model `model_id`'s artifact: the fit's panel, one row per ticker."""
    return models_on_artifact(engine, get_model(engine, model_id).checkpoint_path)


def backtest_fit(
    engine: Engine,
    settings,
    model_id: int,
    folds: int = DEFAULT_FOLDS,
    test_sessions: int | None = None,
    end: dt.date | None = None,
    reuse: bool | None = None,
    only: list[str] | None = None,
) -> RecipeBacktest:
    """Backtest the global fit of model `model_id` (a recipe's registry row) on its whole panel; writes
    each ticker's folds under its own model id (see the module doc), or only `only`'s (a per-ticker
    caller: the other tickers' folds are still fitted on, and stored for them to reuse).
    `reuse` (default `settings.backtest_reuse`) takes a fold's stored outcome instead of refitting it."""
    reuse = settings.backtest_reuse if reuse is None else reuse
    from ldtm_core.data.prices import earliest_price_date, latest_price_date

    t0 = time.perf_counter()
    records = fit_records(engine, model_id)
    head = records[0]
    cfg = config_from(head.recipe, json.loads(head.config_json))
    sig = cfg.signature
    by_ticker = {r.ticker: r for r in records}
    tickers = sorted(by_ticker)  # scored
    pool = sorted({*(fit_pool(engine, head.id) or ()), *tickers})  # fitted on
    start = earliest_price_date(engine, pool)
    stop = end or latest_price_date(engine, pool)
    if start is None or stop is None:
        raise NotFoundError(f"no prices for the tickers of model {model_id}'s fit")
    panel, members = _panel_for(engine, pool, start, stop, cfg)
    rt = runtime(cfg)
    plans = _plans(panel, members, tickers, sig, cfg, rt, folds, test_sessions, (tuple(pool), start, stop))
    # A ticker is judged on the folds its rows reach (daily files end on different dates; membership
    # starts and ends); one that no fold reaches is skipped, saying where its prices end.
    skipped = {
        t: f"{t} has no testable rows in any of the {len(plans)} folds (quarters from "
        f"{plans[0].place.test_days[0]}; its prices end {pd.Timestamp(panel.days[panel.blocks[t][1] - 1]).date()})"
        if t in panel.blocks
        else f"{t} has no prices up to {stop}"
        for t in tickers
        if not any(t in p.tests for p in plans)
    }
    preds: list[dict[str, np.ndarray]] = []
    reused: list[bool] = []
    fits: list[float] = []
    previous = None  # the previous fold's fit (or its stored artifact), for stale predictions
    for plan in plans:
        stored = _stored(engine, list(plan.keys.values())) if reuse else {}
        intact = {key: path for key, s in stored.items() if (path := _artifact(settings, s))}
        if reuse and len(intact) == len(plan.keys):
            preds.append({t: np.asarray(stored[key]["pred"], float) for t, key in plan.keys.items()})
            reused.append(True)
            fits.append(0.0)
            key = next(iter(plan.keys.values()))
            previous = (intact[key], stored[key]["weights_sha256"])
            continue
        f0 = time.perf_counter()
        model = budget.fit(panel.x[plan.train], panel.y[plan.train], cfg)
        fits.append(time.perf_counter() - f0)
        before = artifacts.load(*previous) if isinstance(previous, tuple) else previous
        name = f"recipe-{cfg.kind}-{_digest(np.array(sorted(plan.keys.values()), dtype=object))[:24]}.json"
        sha = artifacts.save(model, fold_cache.weights_dir(settings) / name)
        fold_preds = {t: _prices(model, panel, rows) for t, rows in plan.tests.items()}
        stale = {t: _prices(before, panel, rows) for t, rows in plan.tests.items()} if before else {}
        _store(engine, settings, plan, sig, cfg, (name, sha), panel, fold_preds, stale)
        preds.append(fold_preds)
        reused.append(False)
        previous = model
    results = {}
    for t in tickers:
        if t in skipped or (only is not None and t not in only):
            continue
        rows = panel.rows_of(t)
        local = {r: i for i, r in enumerate(rows)}
        result = BacktestResult(
            str(uuid.uuid4()),
            t,
            by_ticker[t].id,
            config_signature=sig,
            data_start=pd.Timestamp(panel.days[rows].min()).date(),
            data_end=pd.Timestamp(panel.days[rows].max()).date(),
            features=inputs_of(cfg).name,
        )
        for plan, fold_preds, was_reused, fit_s in zip(plans, preds, reused, fits, strict=True):
            if t not in plan.tests:  # a fold its rows do not reach
                continue
            test = plan.tests[t]
            idx = np.array([local[r] for r in test])
            scores = score_rows(
                panel.close[rows], panel.prev_close[rows], panel.next_close[rows], idx, fold_preds[t][:, 0]
            )
            result.folds.append(
                FoldResult(
                    plan.place.fold,
                    _window(panel, plan, test),
                    FoldFit(plan.keys[t], was_reused, False, 0, 0, float("nan"), fit_s),
                    scores,
                )
            )
        write_folds(engine, result, stored_rows(result))
        results[t] = result
    return RecipeBacktest(
        head.recipe,
        results,
        skipped,
        reused.count(False),
        reused.count(True),
        time.perf_counter() - t0,
    )


def backtest_ticker(
    engine: Engine,
    settings,
    rec: ModelRecord,
    folds: int = DEFAULT_FOLDS,
    test_sessions: int | None = None,
    end: dt.date | None = None,
    reuse: bool | None = None,
) -> BacktestResult:
    """One ticker's backtest of a global recipe's model `rec`: its fit backtested on the whole panel,
    this ticker's folds written (the first ticker fits each fold, the others reuse it from the fold
    store). A recipe that fails to fit is an InputError naming it, never a crash of the caller's run."""
    try:
        fit = backtest_fit(engine, settings, rec.id, folds, test_sessions, end, reuse, only=[rec.ticker])
    except LDTMError:
        raise
    except Exception as exc:  # noqa: BLE001 - reported by recipe name, per ticker
        raise InputError(f"recipe {rec.recipe}: {summary(exc)}") from None
    if rec.ticker not in fit.results:
        raise InputError(fit.skipped.get(rec.ticker, f"{rec.ticker}: nothing to test"))
    return fit.results[rec.ticker]


def _window(panel: Panel, plan: _Fold, test: np.ndarray) -> FoldWindow:
    """The fold's rows as the per-ticker backtest describes them; leakage counted from the index sets."""
    day = lambda v: pd.Timestamp(v).date()  # noqa: E731
    train = plan.train
    leaks = int(
        (panel.days[test] <= plan.place.cutoff).sum() + (panel.last_target[train] > plan.place.cutoff).sum()
    )
    return FoldWindow(
        cutoff=day(plan.place.cutoff),
        train_start=day(panel.days[train].min()),
        train_end=day(panel.days[train].max()),
        test_start=day(panel.days[test].min()),
        test_end=day(panel.days[test].max()),
        n_train=len(train),
        n_val=0,
        leakage_rows=leaks,
    )


def _store(engine, settings, plan: _Fold, sig: str, cfg, artifact, panel: Panel, preds: dict, stale: dict):
    """Each ticker's fold outcome under its key, one transaction. A key already stored with an intact
    artifact is kept (one key, one result); one whose artifact is gone is replaced by this fit."""
    name, sha = artifact
    t = backtest_fold_results.c
    now = dt.datetime.now(dt.UTC)
    cutoff = pd.Timestamp(plan.place.cutoff).date()

    def row(ticker: str) -> dict:
        result = {
            "weights_file": name,
            "weights_sha256": sha,
            "dates": [str(d) for d in panel.days[plan.tests[ticker]]],
            "pred": preds[ticker].tolist(),
            "epochs": 0,
            "best_epoch": 0,
            "val_loss": float("nan"),
        }
        if ticker in stale:
            result["stale_pred"] = stale[ticker].tolist()
        return {
            "fold_key": plan.keys[ticker],
            "ticker": ticker,
            "config_signature": sig,
            "data_fingerprint": plan.fingerprints[ticker],
            "cutoff": cutoff,
            "seed": int(cfg.seed),
            "parent_key": None,
            "weights_path": str(Path("folds") / name),
            "result_json": json.dumps(result),
            "created_at": now,
        }

    with engine.begin() as conn:
        keys = list(plan.keys.values())
        have = dict(conn.execute(select(t.fold_key, t.result_json).where(t.fold_key.in_(keys))).all())
        broken = [k for k, r in have.items() if _artifact(settings, json.loads(r)) is None]
        if broken:
            conn.execute(delete(backtest_fold_results).where(t.fold_key.in_(broken)))
        new = [row(tk) for tk, key in plan.keys.items() if key not in have or key in broken]
        if new:
            conn.execute(insert(backtest_fold_results), new)
