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
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import torch
from sqlalchemy import Engine, insert, select

from ldtm_core.config import Settings
from ldtm_core.data.feature_store import prices_and_features
from ldtm_core.data.samples import SampleSet, build_samples
from ldtm_core.data.universe import validate_ticker
from ldtm_core.db import run_in_transaction
from ldtm_core.errors import InputError, NotFoundError
from ldtm_core.learning import fold_cache, split, training_loop

# The fold geometry lives beside: tuning and the benchmarks read it from here.
from ldtm_core.learning.fold_calendar import FOLD_PERIOD, FoldSpan, covered_live, fold_spans  # noqa: F401
from ldtm_core.learning.model import ModelConfig
from ldtm_core.learning.registry import config_signature, get_model, newest_candidate
from ldtm_core.schema import backtest_folds, model_registry
from ldtm_core.scoring import baselines
from ldtm_core.scoring.baselines import baseline_columns
from ldtm_core.scoring.skill import SkillTest, discordant_counts, pooled

DEFAULT_TEST_SESSIONS = 63  # about a quarter of sessions: what one fold tests by default (a whole quarter)
DEFAULT_FOLDS = 3
# Folds start cold by default. Warm chaining (fold k+1 from fold k's weights) fits a from-scratch
# backtest 1.3x faster, but a chain's folds all change when a quarter completes (fold 1 moves), while
# cold folds keep their keys and refit only the new quarter: with stored folds reused, cold is the
# cheaper weekly loop and the seed's own recipe (docs/performance.md, issue 22).
DEFAULT_WARM_START = False


@dataclass
class FoldResult:
    fold: int
    cutoff: dt.date
    train_start: dt.date
    train_end: dt.date
    test_start: dt.date
    test_end: dt.date
    n: int
    hits: int
    up_hits: int
    direction_accuracy: float
    always_up_accuracy: float
    mean_abs_pct_error: float
    leakage_rows: int
    n_train: int
    n_val: int
    model_only_hits: int = 0  # discordant rows vs always-up (ldtm_core.scoring.skill)
    up_only_hits: int = 0
    epochs: int = 0
    best_epoch: int = 0
    val_loss: float = float("nan")
    fit_s: float = 0.0
    warm_start: bool = False
    tuning_leakage_rows: int = 0  # of leakage_rows: test rows the tuning study's trials used
    fold_key: str = ""  # its stored outcome in backtest_fold_results (ldtm_core.learning.fold_cache)
    reused: bool = False  # taken from the store rather than refitted
    ties: int = 0  # of the n test rows: a zero next-day move, scored by nobody (out of every accuracy)
    # Persistence and the trailing-majority baseline on the same rows (scoring.baselines).
    baselines: dict = field(default_factory=dict)

    @property
    def skill(self) -> SkillTest:
        return SkillTest(self.model_only_hits, self.up_only_hits)


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
        return sum(f.n for f in self.folds)

    @property
    def ties(self) -> int:
        return sum(f.ties for f in self.folds)

    @property
    def direction_accuracy(self) -> float:
        scored = self.n - self.ties
        return sum(f.hits for f in self.folds) / scored if scored else float("nan")

    @property
    def always_up_accuracy(self) -> float:
        scored = self.n - self.ties
        return sum(f.up_hits for f in self.folds) / scored if scored else float("nan")

    @property
    def mean_abs_pct_error(self) -> float:
        return sum(f.mean_abs_pct_error * f.n for f in self.folds) / self.n if self.n else float("nan")

    @property
    def leakage_rows(self) -> int:
        return sum(f.leakage_rows for f in self.folds)

    @property
    def reused_folds(self) -> int:
        return sum(f.reused for f in self.folds)

    @property
    def refit_folds(self) -> int:
        return len(self.folds) - self.reused_folds

    @property
    def skill(self) -> SkillTest | None:
        """The exact test of "the model beats always-up" on all test rows of all folds."""
        return pooled([f.skill for f in self.folds])

    @property
    def baselines(self) -> dict:
        """Persistence and the trailing-majority baseline over all folds' rows, with their paired tests."""
        if not self.folds or not all(f.baselines for f in self.folds):
            return {}
        return {
            k: sum((f.baselines[k] for f in self.folds[1:]), self.folds[0].baselines[k])
            for k in self.folds[0].baselines
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


@torch.no_grad()
def predict_prices(model, samples: SampleSet) -> np.ndarray:
    """[n, H] predicted prices (one column per horizon) of every row of `samples`."""
    y = np.concatenate(
        [model(torch.from_numpy(samples.x[i : i + 4096])).numpy() for i in range(0, len(samples), 4096)]
    )
    return samples.denormalise(y)


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
    prices the candidate's backtest read).
    """
    t0 = time.perf_counter()
    ticker = validate_ticker(ticker)
    if folds < 1:
        raise InputError(f"folds must be >= 1, not {folds}")
    if test_sessions is not None and test_sessions < 1:
        raise InputError(f"test sessions per fold must be >= 1, not {test_sessions}")
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
    prices, feats = prices_and_features(engine, ticker, end=end)
    if prices.empty:
        raise NotFoundError(f"no prices for {ticker}")
    seen_by_study = tuning_seen(engine, model_id, cfg)
    samples = build_samples(prices, cfg.window, features=feats.frame)
    evaluable, spans = fold_spans(samples, folds, test_sessions, ticker)
    sessions = samples.dates
    labeled = np.flatnonzero(samples.labeled)
    result = BacktestResult(
        str(uuid.uuid4()),
        ticker,
        model_id,
        features=feats.describe(),
        config_signature=config_signature(cfg),
        data_start=_d(prices["date"].min()),
        data_end=_d(prices["date"].max()),
    )
    result.live = covered_live(samples, spans)
    # The starting weights of the next fold and the rows they were trained on (their lineage).
    init_state, seen = fold_one_start(samples, labeled)
    reuse = settings.backtest_reuse if reuse is None else reuse
    # The key of the fold the next one starts from, and that fold's weights on disk when it was reused
    # (loaded only if the next fold must refit).
    parent = None if init_state is None else fold_cache.state_digest(init_state)
    init_path = None
    rt = fold_cache.runtime(cfg, device)  # precision, device, torch and code: part of every fold's key
    for k, span in enumerate(spans):
        test_idx, cutoff, pool = fold_rows(samples, evaluable, labeled, span.start, len(span.test_idx))
        sub = samples.subset(pool)
        tr, va = split.purged_split(sub, cfg.val_fraction)
        train_idx, val_idx = pool[tr], pool[va]
        if len(train_idx) < cfg.batch_size or len(val_idx) == 0:
            raise InputError(
                f"{ticker} fold {k + 1} (cutoff {_d(cutoff)}): too little history before the cutoff "
                f"({len(train_idx)} training / {len(val_idx)} validation rows)"
            )
        used = np.concatenate([train_idx, val_idx])
        fingerprint = fold_cache.fingerprint(samples, used, test_idx)
        key = fold_cache.fold_key(
            result.config_signature,
            fingerprint,
            _d(cutoff),
            cfg.seed,
            parent,
            rt,
        )
        stored = fold_cache.load(engine, settings, key) if reuse else None
        if stored is not None and stored.weights is not None:
            preds, weights_path = stored.pred, stored.weights
            epochs, best_epoch, val_loss, fit_s = stored.epochs, stored.best_epoch, stored.val_loss, 0.0
            next_state = None
        else:
            stored = None
            if init_state is None and init_path is not None:
                init_state = fold_cache.load_weights(init_path)
            fit = training_loop.fit(
                samples.subset(train_idx),
                samples.subset(val_idx),
                cfg,
                device=device,
                threads=threads,
                init_state=init_state,
            )
            preds = predict_prices(fit.model, samples.subset(test_idx))
            epochs, best_epoch, val_loss, fit_s = fit.epochs, fit.best_epoch, fit.val_loss, fit.duration_s
            # What the key now stores is what is scored (an existing row with intact weights is kept).
            preds = fold_cache.store(
                engine,
                settings,
                key=key,
                ticker=ticker,
                signature=result.config_signature,
                data_fingerprint=fingerprint,
                cutoff=_d(cutoff),
                seed=cfg.seed,
                parent=parent,
                model=fit.model,
                pred=preds,
                test_dates=samples.dates[test_idx],
                epochs=epochs,
                best_epoch=best_epoch,
                val_loss=val_loss,
            )
            weights_path, next_state = None, fit.model.state_dict()
        test = samples.subset(test_idx)
        pred = preds[:, 0]
        hits, up, mape, ties = score(pred, test.target_close[:, 0], test.close)
        scored = len(test_idx) - ties  # n stays the fold's test rows (the champion's rerun reads it)
        skill = skill_test(pred, test.target_close[:, 0], test.close)
        paired = baselines.score(
            np.sign(pred - test.close) == np.sign(test.target_close[:, 0] - test.close),
            test.target_close[:, 0],
            test.close,
            test.prev_close,
            baselines.trailing_majority(samples.close, samples.prev_close, test_idx),
        )
        lineage = np.union1d(seen, used)
        study_rows = int((samples.dates[test_idx] < seen_by_study.before).sum()) if seen_by_study else 0
        result.folds.append(
            FoldResult(
                fold=k + 1,
                cutoff=_d(cutoff),
                train_start=_d(sessions[used].min()),
                train_end=_d(sessions[used].max()),
                test_start=_d(sessions[test_idx].min()),
                test_end=_d(sessions[test_idx].max()),
                n=len(test_idx),
                hits=hits,
                up_hits=up,
                # Over the scored rows; 0 when all are ties (a weight-0 figure, never NaN: SQLite stores
                # NaN as NULL).
                direction_accuracy=hits / scored if scored else 0.0,
                always_up_accuracy=up / scored if scored else 0.0,
                ties=ties,
                mean_abs_pct_error=mape,
                leakage_rows=count_leakage(samples, lineage, test_idx, cutoff) + study_rows,
                n_train=len(train_idx),
                n_val=len(val_idx),
                model_only_hits=skill.model_only,
                up_only_hits=skill.up_only,
                epochs=epochs,
                best_epoch=best_epoch,
                val_loss=val_loss,
                fit_s=fit_s,
                warm_start=parent is not None,
                tuning_leakage_rows=study_rows,
                fold_key=key,
                reused=stored is not None,
                baselines=paired,
            )
        )
        if warm_start:
            init_state, init_path, parent, seen = next_state, weights_path, key, lineage
        else:
            init_state, init_path, parent, seen = None, None, None, labeled[:0]
    study_rows = sum(f.tuning_leakage_rows for f in result.folds)
    if study_rows:
        s = seen_by_study
        tuned_for = f" (it was tuned for {s.folds} folds)" if s.folds else ""
        result.tuning_note = (
            f"{ticker}: {study_rows} test row(s) of fold(s) "
            f"{', '.join(str(f.fold) for f in result.folds if f.tuning_leakage_rows)} are dated within "
            f"what tuning study {s.study} {s.last}{tuned_for}: its settings were chosen on them, so "
            f"they count as leakage; backtest with the study's folds, or tune again for this backtest"
        )
    now = dt.datetime.now(dt.UTC)
    rows = [
        {
            "backtest_id": result.backtest_id,
            "model_id": model_id,
            "ticker": ticker,
            "fold": f.fold,
            "cutoff": f.cutoff,
            "train_start": f.train_start,
            "train_end": f.train_end,
            "test_start": f.test_start,
            "test_end": f.test_end,
            "n": f.n,
            "direction_accuracy": f.direction_accuracy,
            "always_up_accuracy": f.always_up_accuracy,
            "mean_abs_pct_error": f.mean_abs_pct_error,
            "leakage_rows": f.leakage_rows,
            "model_only_hits": f.model_only_hits,
            "up_only_hits": f.up_only_hits,
            "ties": f.ties,
            "created_at": now,
            "config_signature": result.config_signature,
            "data_start": result.data_start,
            "data_end": result.data_end,
            "fold_key": f.fold_key,
            "reused": f.reused,
            **baseline_columns(f.baselines),
        }
        for f in result.folds
    ]
    run_in_transaction(engine, lambda conn: conn.execute(insert(backtest_folds), rows))
    result.duration_s = time.perf_counter() - t0
    return result
