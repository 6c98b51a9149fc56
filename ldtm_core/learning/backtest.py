"""Walk-forward backtest (SPEC §10): each fold trains only on what was known at its cutoff.

Fold k tests on a block of consecutive sessions; its cutoff is the last session before that block.
Training rows are the labeled samples whose every target date is on or before the cutoff (the purge),
split chronologically into train/validation by `split.purged_split`. Leakage is counted from the
index sets actually used, never assumed: test rows dated on or before the cutoff plus training or
validation rows with a target date after it. For a model whose settings come from a tuning study,
test rows dated on or before the last price date the study's trials used count too: the search chose
its settings on them (a backtest with more folds, or longer ones, than the study was tuned for).
"""

from __future__ import annotations

import datetime as dt
import json
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from sqlalchemy import Engine, insert, select

from ldtm_core.config import Settings
from ldtm_core.data.feature_store import prices_and_features
from ldtm_core.data.membership import load_membership
from ldtm_core.data.samples import SampleSet, build_samples
from ldtm_core.data.universe import validate_ticker
from ldtm_core.db import run_in_transaction
from ldtm_core.errors import InputError, NotFoundError
from ldtm_core.learning import fold_cache, split, training_loop

# The fold geometry lives beside: tuning and the benchmarks read it from here.
from ldtm_core.learning.fold_calendar import FOLD_PERIOD, FoldSpan, covered_live, fold_spans  # noqa: F401
from ldtm_core.learning.model import ModelConfig
from ldtm_core.learning.registry import config_signature, get_model, newest_candidate
from ldtm_core.schema import backtest_fold_baselines, backtest_folds, model_registry
from ldtm_core.scoring import baselines
from ldtm_core.scoring.skill import SkillTest, discordant_counts, pooled

DEFAULT_TEST_SESSIONS = 63  # about a quarter of sessions: what one fold tests by default (a whole quarter)
DEFAULT_FOLDS = 3
# Folds start cold by default. Warm chaining (fold k+1 from fold k's weights) fits a from-scratch
# backtest 1.3x faster, but a chain's folds all change when a quarter completes (fold 1 moves), while
# cold folds keep their keys and refit only the new quarter: with stored folds reused, cold is the
# cheaper weekly loop and the seed's own recipe (docs/performance.md).
DEFAULT_WARM_START = False


@dataclass(frozen=True)
class FoldWindow:
    """The rows fold k trained and tested on: their dates, their counts, and the leakage among them."""

    cutoff: dt.date
    train_start: dt.date
    train_end: dt.date
    test_start: dt.date
    test_end: dt.date
    n_train: int
    n_val: int
    leakage_rows: int
    tuning_leakage_rows: int = 0  # of leakage_rows: test rows the tuning study's trials used


@dataclass(frozen=True)
class FoldFit:
    """How the fold's model came to be: fitted here, or its stored outcome reused."""

    fold_key: str  # its stored outcome in backtest_fold_results (ldtm_core.learning.fold_cache)
    reused: bool = False  # taken from the store rather than refitted
    warm_start: bool = False
    epochs: int = 0
    best_epoch: int = 0
    val_loss: float = float("nan")
    fit_s: float = 0.0


@dataclass(frozen=True)
class FoldScores:
    """The model's next-day calls on the fold's n test rows, against always-up and the baselines."""

    n: int  # the fold's test rows, ties included (the champion's rerun reads it)
    hits: int
    up_hits: int
    ties: int  # of the n test rows: a zero next-day move, scored by nobody (out of every accuracy)
    mean_abs_pct_error: float
    model_only_hits: int = 0  # discordant rows vs always-up (ldtm_core.scoring.skill)
    up_only_hits: int = 0
    # Persistence and the trailing-majority baseline on the same rows (scoring.baselines).
    baselines: dict = field(default_factory=dict)

    # Over the scored rows; 0 when all are ties (a weight-0 figure, never NaN: SQLite stores NaN as NULL).
    @property
    def direction_accuracy(self) -> float:
        scored = self.n - self.ties
        return self.hits / scored if scored else 0.0

    @property
    def always_up_accuracy(self) -> float:
        scored = self.n - self.ties
        return self.up_hits / scored if scored else 0.0

    @property
    def skill(self) -> SkillTest:
        return SkillTest(self.model_only_hits, self.up_only_hits)


@dataclass(frozen=True)
class FoldResult:
    """Fold k of a backtest: its rows (window), how its model came to be (fit), and its scores."""

    fold: int
    window: FoldWindow
    fit: FoldFit
    scores: FoldScores


@dataclass
class BacktestResult:
    backtest_id: str
    ticker: str
    model_id: int | None
    config_signature: str = ""
    data_start: dt.date | None = None
    data_end: dt.date | None = None
    folds: list[FoldResult] = field(default_factory=list)
    duration_s: float = 0.0
    features: str = ""  # "stored" or "recomputed (why)"
    tuning_note: str = ""  # why test rows the tuning study saw count as leakage; empty when none did
    live: tuple[dt.date, dt.date] | None = None  # sessions after the newest fold: covered live only

    @property
    def live_note(self) -> str:
        if self.live is None:
            return "the folds reach the newest session"
        return f"{self.live[0]} .. {self.live[1]} in no fold yet: covered live (shadow evenings)"

    @property
    def n(self) -> int:
        return sum(f.scores.n for f in self.folds)

    @property
    def ties(self) -> int:
        return sum(f.scores.ties for f in self.folds)

    @property
    def direction_accuracy(self) -> float:
        scored = self.n - self.ties
        return sum(f.scores.hits for f in self.folds) / scored if scored else float("nan")

    @property
    def always_up_accuracy(self) -> float:
        scored = self.n - self.ties
        return sum(f.scores.up_hits for f in self.folds) / scored if scored else float("nan")

    @property
    def mean_abs_pct_error(self) -> float:
        return (
            sum(f.scores.mean_abs_pct_error * f.scores.n for f in self.folds) / self.n
            if self.n
            else float("nan")
        )

    @property
    def leakage_rows(self) -> int:
        return sum(f.window.leakage_rows for f in self.folds)

    @property
    def reused_folds(self) -> int:
        return sum(f.fit.reused for f in self.folds)

    @property
    def refit_folds(self) -> int:
        return len(self.folds) - self.reused_folds

    @property
    def skill(self) -> SkillTest | None:
        """The exact test of "the model beats always-up" on all test rows of all folds."""
        return pooled([f.scores.skill for f in self.folds])

    @property
    def baselines(self) -> dict:
        """Persistence and the trailing-majority baseline over all folds' rows, with their paired tests."""
        if not self.folds or not all(f.scores.baselines for f in self.folds):
            return {}
        return {
            k: sum((f.scores.baselines[k] for f in self.folds[1:]), self.folds[0].scores.baselines[k])
            for k in self.folds[0].scores.baselines
        }


def _d(value) -> dt.date:
    return pd.Timestamp(value).date()


def score(pred: np.ndarray, actual: np.ndarray, close: np.ndarray) -> tuple[int, int, float, int]:
    """(direction hits, always-up hits, mean |pct error|, ties) of next-day predictions on the same rows.

    A tie (next-day close equal to the run-date close) is scored by nobody (fillback.direction_hit):
    neither the model's hit nor always-up's; the error still counts."""
    decided = actual != close
    hits = int(((np.sign(pred - close) == np.sign(actual - close)) & decided).sum())
    up = int((actual > close).sum())
    mape = float(np.mean(np.abs(pred - actual) / actual * 100.0)) if len(actual) else float("nan")
    return hits, up, mape, int((~decided).sum())


def skill_test(pred: np.ndarray, actual: np.ndarray, close: np.ndarray) -> SkillTest:
    """Discordant rows of the model's next-day direction vs always-up on the decided rows (ties out)."""
    decided = actual != close
    model_right = np.sign(pred - close) == np.sign(actual - close)
    return discordant_counts(model_right[decided], (actual > close)[decided])


def count_leakage(samples: SampleSet, train_idx: np.ndarray, test_idx: np.ndarray, cutoff) -> int:
    """Test rows dated <= cutoff plus training rows whose latest target date is > cutoff.

    With a warm start `train_idx` is the fold's whole lineage: its own rows and every row the starting
    weights were trained on, so weights that saw the future count as leakage too.
    """
    c = np.datetime64(cutoff, "D")
    late_targets = int((samples.target_dates[train_idx].max(axis=1) > c).sum()) if len(train_idx) else 0
    return int((samples.dates[test_idx] <= c).sum()) + late_targets


def fold_rows(
    samples: SampleSet, evaluable: np.ndarray, labeled: np.ndarray, start: int, block: int
) -> tuple[np.ndarray, np.datetime64, np.ndarray]:
    """(test indices, cutoff, fitting pool) of the fold whose test block starts at evaluable[start].

    The cutoff is the last session before the block; the pool is every labeled row whose latest
    target date is on or before it (the purge). Tests replace this function to plant a leak.
    """
    test_idx = evaluable[start : start + block]
    cutoff = samples.dates[test_idx[0] - 1]
    latest_target = samples.target_dates.max(axis=1)
    return test_idx, cutoff, labeled[latest_target[labeled] <= cutoff]


def fold_one_start(samples: SampleSet, labeled: np.ndarray) -> tuple[dict | None, np.ndarray]:
    """(starting weights, rows they were trained on) of fold 1: always cold, nothing seen.

    Fold 1 must never start from the active model or anything else whose data reaches past its
    cutoff; the leakage count covers the starting weights' rows. Tests replace this to plant such a start.
    """
    return None, labeled[:0]


@dataclass(frozen=True)
class TuningSeen:
    """Test rows dated before `before` were seen by the study the model's settings come from."""

    before: np.datetime64
    study: str
    last: str  # what the study recorded, for the message
    folds: int | None


def tuning_seen(engine: Engine, model_id: int, cfg: ModelConfig) -> TuningSeen | None:
    """From the model's recorded provenance (`tuning_store.ticker_settings`), when the backtested
    config is the model's own (another config's hyper-parameters did not come from the study)."""
    with engine.connect() as conn:
        row = conn.execute(
            select(model_registry.c.metrics_json, model_registry.c.config_json).where(
                model_registry.c.id == model_id
            )
        ).first()
    if row is None or config_signature(ModelConfig.from_dict(json.loads(row.config_json))) != (
        config_signature(cfg)
    ):
        return None
    metrics = json.loads(row.metrics_json or "{}")
    last, holdout = metrics.get("tuning_last_date"), metrics.get("tuning_holdout_cutoff")
    if last:
        before, shown = np.datetime64(last, "D") + 1, f"used prices up to {last}"
    elif holdout:  # a study recorded before its last date was: its trials used only dates before this
        before, shown = np.datetime64(holdout, "D"), f"used prices before {holdout}"
    else:
        return None
    return TuningSeen(before, str(metrics.get("tuned_study", "?")), shown, metrics.get("tuning_folds"))


def member_rows(engine: Engine, ticker: str, samples: SampleSet) -> np.ndarray | None:
    """One flag per sample row: was `ticker` a member of the universe on the row's evening
    (universe_membership)? None with no stored history: every evening counts, as before."""
    membership = load_membership(engine)
    return membership.mask(ticker, samples.dates) if membership.has_history else None


@torch.no_grad()
def predict_prices(model, samples: SampleSet) -> np.ndarray:
    """[n, H] predicted prices (one column per horizon) of every row of `samples`."""
    y = np.concatenate(
        [model(torch.from_numpy(samples.x[i : i + 4096])).numpy() for i in range(0, len(samples), 4096)]
    )
    return samples.denormalise(y)


@dataclass(frozen=True)
class _Backtest:
    """What every fold of one backtest reads: the ticker's samples and how to fit them."""

    engine: Engine
    settings: Settings
    ticker: str
    cfg: ModelConfig
    samples: SampleSet
    labeled: np.ndarray
    signature: str
    seen_by_study: TuningSeen | None
    runtime: fold_cache.Runtime  # precision, device, torch and code: part of every fold's key
    device: str | None
    threads: int | None
    reuse: bool
    warm_start: bool


@dataclass(frozen=True)
class _FoldPlan:
    """Fold k's rows (sample indices) and its key in the fold store, before anything is fitted."""

    fold: int
    cutoff: np.datetime64
    train_idx: np.ndarray
    val_idx: np.ndarray
    test_idx: np.ndarray
    lineage: np.ndarray  # the rows its weights are trained on: its own and its starting weights'
    fingerprint: str
    key: str
    parent: str | None  # the key of the fold it starts from (or of a planted start); None: cold
    window: FoldWindow


@dataclass(frozen=True)
class _Start:
    """The weights a fold starts from: in memory (its predecessor was fitted here) or on disk (its
    predecessor was reused: loaded only if this fold must refit); neither: cold."""

    state: dict | None = None
    path: Path | None = None

    def weights(self) -> dict | None:
        if self.state is None and self.path is not None:
            return fold_cache.load_weights(self.path)
        return self.state


def run_backtest(
    engine: Engine,
    settings: Settings,
    ticker: str,
    cfg: ModelConfig | None = None,
    folds: int = DEFAULT_FOLDS,
    model_id: int | None = None,
    test_sessions: int | None = None,
    *,
    device: str | None = None,
    threads: int | None = 1,
    warm_start: bool = DEFAULT_WARM_START,
    reuse: bool | None = None,
    end: dt.date | None = None,
) -> BacktestResult:
    """Walk-forward backtest of `cfg` (default: the model's config) on `ticker`; writes backtest_folds.

    `model_id` names the candidate this backtest validates (default: the ticker's newest candidate).
    Every fold row records the config's signature and the price range read: the gate accepts only a
    backtest of the candidate's own config. `warm_start` starts fold k+1 from fold k's weights (fold k
    saw only rows before its own, earlier cutoff); fold 1 always starts cold (`fold_one_start`).
    `reuse` (default `settings.backtest_reuse`) takes a fold's stored outcome (`fold_cache`) instead
    of refitting it when its key — config, rows, cutoff, seed, starting weights — is unchanged.
    `end`: read prices up to this date only (the gate backtests the champion's config on the very
    prices the candidate's backtest read; `ldtm backtest --end` keeps the folds before a replay window).
    With a membership history (universe_membership) a fold tests only evenings on which the ticker was a
    member of the universe (`member_rows`, `fold_calendar.fold_spans`).

    Each fold is planned (`_plan`), fitted or reused (`_fit_or_reuse`) and scored (`_score`) in turn;
    the folds are written at the end, in one transaction (`write_folds`).
    """
    t0 = time.perf_counter()
    ticker = validate_ticker(ticker)
    if folds < 1:
        raise InputError(f"folds must be >= 1, not {folds}")
    if test_sessions is not None and test_sessions < 1:
        raise InputError(f"test sessions per fold must be >= 1, not {test_sessions}")
    model_id, cfg = _candidate(engine, ticker, cfg, model_id)
    prices, feats = prices_and_features(engine, ticker, end=end, features=cfg.features)
    if prices.empty:
        raise NotFoundError(f"no prices for {ticker}")
    seen_by_study = tuning_seen(engine, model_id, cfg)
    samples = build_samples(prices, cfg.window, features=feats.frame, names=cfg.features)
    evaluable, spans = fold_spans(samples, folds, test_sessions, ticker, member_rows(engine, ticker, samples))
    result = BacktestResult(
        str(uuid.uuid4()),
        ticker,
        model_id,
        features=feats.describe(),
        config_signature=config_signature(cfg),
        data_start=_d(prices["date"].min()),
        data_end=_d(prices["date"].max()),
        live=covered_live(samples, spans),
    )
    labeled = np.flatnonzero(samples.labeled)
    init_state, seen = fold_one_start(samples, labeled)
    bt = _Backtest(
        engine,
        settings,
        ticker,
        cfg,
        samples,
        labeled,
        result.config_signature,
        seen_by_study,
        fold_cache.runtime(cfg, device),
        device,
        threads,
        settings.backtest_reuse if reuse is None else reuse,
        warm_start,
    )
    start = _Start(state=init_state)
    for plan in _plans(bt, evaluable, spans, start, seen):
        fit, preds, fitted = _fit_or_reuse(bt, plan, start)
        result.folds.append(FoldResult(plan.fold, plan.window, fit, _score(samples, plan.test_idx, preds)))
        start = fitted if warm_start else _Start()
    result.tuning_note = _tuning_note(ticker, result.folds, seen_by_study)
    write_folds(engine, result, stored_rows(result))
    result.duration_s = time.perf_counter() - t0
    return result


def _candidate(
    engine: Engine, ticker: str, cfg: ModelConfig | None, model_id: int | None
) -> tuple[int, ModelConfig]:
    """(the model this backtest validates, the config it backtests): `model_id` or the ticker's newest
    candidate, and `cfg` or that model's own config."""
    if model_id is None:
        cand = newest_candidate(engine, ticker)
        model_id = cand.id if cand else None
        cfg = cfg or (cand.config if cand else None)
    else:
        rec = get_model(engine, model_id)
        if rec.ticker != ticker:
            raise InputError(f"model {model_id} belongs to {rec.ticker}, not {ticker}")
        cfg = cfg or rec.config
    if model_id is None:
        # Folds without a model validate nothing the gate could promote.
        raise NotFoundError(
            f"{ticker} has no candidate model to backtest: train first (ldtm train --tickers {ticker})"
        )
    return model_id, cfg


def _plans(
    bt: _Backtest, evaluable: np.ndarray, spans: list[FoldSpan], first: _Start, seen: np.ndarray
) -> Iterator[_FoldPlan]:
    """Each fold's plan in turn, made only once the fold before it is done (a fold with too little
    history stops the backtest after the folds before it were fitted and stored). With `warm_start` a
    fold's key and lineage chain from the fold before it; fold 1's from `first` and `seen`
    (`fold_one_start`)."""
    parent = None if first.state is None else fold_cache.state_digest(first.state)
    for k, span in enumerate(spans):
        plan = _plan(bt, evaluable, k + 1, span, parent, seen)
        yield plan
        parent, seen = (plan.key, plan.lineage) if bt.warm_start else (None, bt.labeled[:0])


def _plan(
    bt: _Backtest, evaluable: np.ndarray, fold: int, span: FoldSpan, parent: str | None, seen: np.ndarray
) -> _FoldPlan:
    """Fold `fold`'s training, validation and test rows, the leakage among them, and its key."""
    samples, cfg = bt.samples, bt.cfg
    test_idx, cutoff, pool = fold_rows(samples, evaluable, bt.labeled, span.start, len(span.test_idx))
    tr, va = split.purged_split(samples.subset(pool), cfg.val_fraction)
    train_idx, val_idx = pool[tr], pool[va]
    if len(train_idx) < cfg.batch_size or len(val_idx) == 0:
        raise InputError(
            f"{bt.ticker} fold {fold} (cutoff {_d(cutoff)}): too little history before the cutoff "
            f"({len(train_idx)} training / {len(val_idx)} validation rows)"
        )
    used = np.concatenate([train_idx, val_idx])
    fingerprint = fold_cache.fingerprint(samples, used, test_idx)
    key = fold_cache.fold_key(bt.signature, fingerprint, _d(cutoff), cfg.seed, parent, bt.runtime)
    lineage = np.union1d(seen, used)
    study = bt.seen_by_study
    study_rows = int((samples.dates[test_idx] < study.before).sum()) if study else 0
    sessions = samples.dates
    window = FoldWindow(
        cutoff=_d(cutoff),
        train_start=_d(sessions[used].min()),
        train_end=_d(sessions[used].max()),
        test_start=_d(sessions[test_idx].min()),
        test_end=_d(sessions[test_idx].max()),
        n_train=len(train_idx),
        n_val=len(val_idx),
        leakage_rows=count_leakage(samples, lineage, test_idx, cutoff) + study_rows,
        tuning_leakage_rows=study_rows,
    )
    return _FoldPlan(fold, cutoff, train_idx, val_idx, test_idx, lineage, fingerprint, key, parent, window)


def _fit_or_reuse(bt: _Backtest, plan: _FoldPlan, start: _Start) -> tuple[FoldFit, np.ndarray, _Start]:
    """(how the fold's model came to be, its [n, H] test predictions, the start it offers the next fold).

    The stored outcome under the fold's key when reuse is on and its weights are intact; else a fit
    from `start`, stored under the key."""
    warm = plan.parent is not None
    stored = fold_cache.load(bt.engine, bt.settings, plan.key) if bt.reuse else None
    if stored is not None and stored.weights is not None:
        fit = FoldFit(plan.key, True, warm, stored.epochs, stored.best_epoch, stored.val_loss, 0.0)
        return fit, stored.pred, _Start(path=stored.weights)
    samples = bt.samples
    fitted = training_loop.fit(
        samples.subset(plan.train_idx),
        samples.subset(plan.val_idx),
        bt.cfg,
        device=bt.device,
        threads=bt.threads,
        init_state=start.weights(),
    )
    fit = FoldFit(plan.key, False, warm, fitted.epochs, fitted.best_epoch, fitted.val_loss, fitted.duration_s)
    # What the key now stores is what is scored (an existing row with intact weights is kept).
    preds = fold_cache.store(
        bt.engine,
        bt.settings,
        key=plan.key,
        ticker=bt.ticker,
        signature=bt.signature,
        data_fingerprint=plan.fingerprint,
        cutoff=_d(plan.cutoff),
        seed=bt.cfg.seed,
        parent=plan.parent,
        model=fitted.model,
        pred=predict_prices(fitted.model, samples.subset(plan.test_idx)),
        test_dates=samples.dates[plan.test_idx],
        epochs=fit.epochs,
        best_epoch=fit.best_epoch,
        val_loss=fit.val_loss,
    )
    return fit, preds, _Start(state=fitted.model.state_dict())


def _score(samples: SampleSet, test_idx: np.ndarray, preds: np.ndarray) -> FoldScores:
    """The next-day column of `preds` on the fold's test rows: hits, always-up, error, paired baselines."""
    return score_rows(samples.close, samples.prev_close, samples.target_close[:, 0], test_idx, preds[:, 0])


def score_rows(
    close: np.ndarray, prev_close: np.ndarray, next_close: np.ndarray, test_idx: np.ndarray, pred: np.ndarray
) -> FoldScores:
    """A fold's scores from one ticker's series (`close`, `prev_close`, `next_close`: the next session's
    close, per row) and the predicted next-day price `pred` of its test rows `test_idx`, any recipe's."""
    actual, now = next_close[test_idx], close[test_idx]
    hits, up, mape, ties = score(pred, actual, now)
    skill = skill_test(pred, actual, now)
    paired = baselines.score(
        np.sign(pred - now) == np.sign(actual - now),
        actual,
        now,
        baselines.calls(close, prev_close, test_idx),
    )
    return FoldScores(len(test_idx), hits, up, ties, mape, skill.model_only, skill.up_only, paired)


def _tuning_note(ticker: str, folds: list[FoldResult], seen_by_study: TuningSeen | None) -> str:
    """Why test rows the tuning study saw count as leakage; empty when none did."""
    study_rows = sum(f.window.tuning_leakage_rows for f in folds)
    if not study_rows:
        return ""
    s = seen_by_study
    tuned_for = f" (it was tuned for {s.folds} folds)" if s.folds else ""
    return (
        f"{ticker}: {study_rows} test row(s) of fold(s) "
        f"{', '.join(str(f.fold) for f in folds if f.window.tuning_leakage_rows)} are dated within "
        f"what tuning study {s.study} {s.last}{tuned_for}: its settings were chosen on them, so "
        f"they count as leakage; backtest with the study's folds, or tune again for this backtest"
    )


def stored_rows(result: BacktestResult) -> list[dict]:
    """One backtest_folds row per fold."""
    now = dt.datetime.now(dt.UTC)
    return [
        {
            "backtest_id": result.backtest_id,
            "model_id": result.model_id,
            "ticker": result.ticker,
            "fold": f.fold,
            "cutoff": f.window.cutoff,
            "train_start": f.window.train_start,
            "train_end": f.window.train_end,
            "test_start": f.window.test_start,
            "test_end": f.window.test_end,
            "n": f.scores.n,
            "direction_accuracy": f.scores.direction_accuracy,
            "always_up_accuracy": f.scores.always_up_accuracy,
            "mean_abs_pct_error": f.scores.mean_abs_pct_error,
            "leakage_rows": f.window.leakage_rows,
            "model_only_hits": f.scores.model_only_hits,
            "up_only_hits": f.scores.up_only_hits,
            "ties": f.scores.ties,
            "created_at": now,
            "config_signature": result.config_signature,
            "data_start": result.data_start,
            "data_end": result.data_end,
            "fold_key": f.fit.fold_key,
            "reused": f.fit.reused,
        }
        for f in result.folds
    ]


def write_folds(engine: Engine, result: BacktestResult, rows: list[dict]) -> None:
    """The fold rows and each fold's baselines (backtest_fold_baselines, revision 0031), one transaction."""
    extra = [
        r for f in result.folds for r in baselines.fold_rows(result.backtest_id, f.fold, f.scores.baselines)
    ]

    def write(conn) -> None:
        conn.execute(insert(backtest_folds), rows)
        if extra:
            conn.execute(insert(backtest_fold_baselines), extra)

    run_in_transaction(engine, write)
