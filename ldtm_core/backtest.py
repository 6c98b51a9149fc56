"""Walk-forward backtest (SPEC §10): each fold trains only on what was known at its cutoff.

Fold k tests on a block of consecutive sessions; its cutoff is the last session before that block.
Training rows are the labeled samples whose every target date is on or before the cutoff (the purge),
split chronologically into train/validation by `split.purged_split`. Leakage is counted from the
index sets actually used, never assumed: test rows dated on or before the cutoff plus training or
validation rows with a target date after it.
"""

from __future__ import annotations

import datetime as dt
import time
import uuid
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import torch
from sqlalchemy import Engine, insert

from . import split, training_loop
from .config import Settings
from .db import run_in_transaction
from .errors import InputError, NotFoundError
from .model import ModelConfig
from .prices import load_ticker_prices
from .registry import get_model, newest_candidate
from .samples import SampleSet, build_samples
from .schema import backtest_folds
from .universe import validate_ticker

DEFAULT_TEST_SESSIONS = 63  # a quarter of sessions per fold
# Folds start cold by default: a backtest should train the way the candidate was trained (retrains
# start cold), and warm-chained folds were faster but not more accurate (docs/performance.md).
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
    epochs: int = 0
    best_epoch: int = 0
    val_loss: float = float("nan")
    fit_s: float = 0.0
    warm_start: bool = False


@dataclass
class BacktestResult:
    backtest_id: str
    ticker: str
    model_id: int | None
    folds: list[FoldResult] = field(default_factory=list)
    duration_s: float = 0.0

    @property
    def n(self) -> int:
        return sum(f.n for f in self.folds)

    @property
    def direction_accuracy(self) -> float:
        return sum(f.hits for f in self.folds) / self.n if self.n else float("nan")

    @property
    def always_up_accuracy(self) -> float:
        return sum(f.up_hits for f in self.folds) / self.n if self.n else float("nan")

    @property
    def mean_abs_pct_error(self) -> float:
        return sum(f.mean_abs_pct_error * f.n for f in self.folds) / self.n if self.n else float("nan")

    @property
    def leakage_rows(self) -> int:
        return sum(f.leakage_rows for f in self.folds)


def _d(value) -> dt.date:
    return pd.Timestamp(value).date()


def score(pred: np.ndarray, actual: np.ndarray, close: np.ndarray) -> tuple[int, int, float]:
    """(direction hits, always-up hits, mean |pct error|) of next-day predictions on the same rows."""
    hits = int((np.sign(pred - close) == np.sign(actual - close)).sum())
    up = int((actual > close).sum())
    mape = float(np.mean(np.abs(pred - actual) / actual * 100.0)) if len(actual) else float("nan")
    return hits, up, mape


def count_leakage(samples: SampleSet, train_idx: np.ndarray, test_idx: np.ndarray, cutoff) -> int:
    """Test rows dated <= cutoff plus training rows whose latest target date is > cutoff.

    With a warm start `train_idx` is the fold's whole lineage: its own rows and every row the starting
    weights were trained on, so weights that saw the future count as leakage too.
    """
    c = np.datetime64(cutoff, "D")
    late_targets = int((samples.target_dates[train_idx].max(axis=1) > c).sum()) if len(train_idx) else 0
    return int((samples.dates[test_idx] <= c).sum()) + late_targets


@torch.no_grad()
def _predict_next_day(model, samples: SampleSet) -> np.ndarray:
    y = np.concatenate(
        [model(torch.from_numpy(samples.x[i : i + 4096])).numpy() for i in range(0, len(samples), 4096)]
    )
    return samples.denormalise(y)[:, 0]


def run_backtest(
    engine: Engine,
    settings: Settings,
    ticker: str,
    cfg: ModelConfig | None = None,
    folds: int = 3,
    model_id: int | None = None,
    test_sessions: int | None = None,
    *,
    device: str | None = None,
    threads: int | None = 1,
    warm_start: bool = DEFAULT_WARM_START,
    _leak_train_sessions: int = 0,
    _leak_test_rows: int = 0,
    _leak_first_fold_from: tuple[dict, dt.date] | None = None,
) -> BacktestResult:
    """Walk-forward backtest of `cfg` (default: the model's config) on `ticker`; writes backtest_folds.

    `model_id` names the candidate this backtest validates (default: the ticker's newest candidate);
    the gate reads the newest backtest of a model. `warm_start` starts fold k+1 from fold k's weights
    (fold k saw only rows before its own, earlier cutoff); fold 1 always starts cold. `_leak_*` exist
    only so tests can plant a leak: they widen the training set past the cutoff, start the test block
    before it, or start fold 1 from (weights, trained through date) that saw the future.
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
    if cfg is None:
        raise InputError(f"{ticker} has no candidate model and no config was given for the backtest")
    prices = load_ticker_prices(engine, ticker)
    if prices.empty:
        raise NotFoundError(f"no prices for {ticker}")
    samples = build_samples(prices, cfg.window)
    evaluable = np.flatnonzero(~np.isnan(samples.target_close[:, 0]))
    block = test_sessions or max(10, min(DEFAULT_TEST_SESSIONS, len(evaluable) // (2 * folds + 2)))
    if block * folds >= len(evaluable):
        raise InputError(
            f"{ticker}: {len(evaluable)} evaluable samples cannot hold {folds} folds of {block} test sessions"
        )
    sessions = samples.dates
    labeled = np.flatnonzero(samples.labeled)
    latest_target = samples.target_dates.max(axis=1)
    result = BacktestResult(str(uuid.uuid4()), ticker, model_id)
    # The starting weights of the next fold and the rows they were trained on (their lineage).
    init_state, seen = None, labeled[:0]
    if _leak_first_fold_from is not None:
        init_state, trained_through = _leak_first_fold_from
        seen = labeled[sessions[labeled] <= np.datetime64(trained_through, "D")]
    for k in range(folds):
        start = len(evaluable) - (folds - k) * block
        test_idx = evaluable[start : start + block]
        cutoff = sessions[test_idx[0] - 1]  # the last session before the test block
        if _leak_test_rows:
            test_idx = evaluable[start - _leak_test_rows : start + block]
        allowed = cutoff
        if _leak_train_sessions:
            pos = int(np.searchsorted(sessions, cutoff))
            allowed = sessions[min(len(sessions) - 1, pos + _leak_train_sessions)]
        pool = labeled[latest_target[labeled] <= allowed]
        sub = samples.subset(pool)
        tr, va = split.purged_split(sub, cfg.val_fraction)
        train_idx, val_idx = pool[tr], pool[va]
        if len(train_idx) < cfg.batch_size or len(val_idx) == 0:
            raise InputError(
                f"{ticker} fold {k + 1} (cutoff {_d(cutoff)}): too little history before the cutoff "
                f"({len(train_idx)} training / {len(val_idx)} validation rows)"
            )
        fit = training_loop.fit(
            samples.subset(train_idx),
            samples.subset(val_idx),
            cfg,
            device=device,
            threads=threads,
            init_state=init_state,
        )
        test = samples.subset(test_idx)
        pred = _predict_next_day(fit.model, test)
        hits, up, mape = score(pred, test.target_close[:, 0], test.close)
        used = np.concatenate([train_idx, val_idx])
        lineage = np.union1d(seen, used)
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
                direction_accuracy=hits / len(test_idx),
                always_up_accuracy=up / len(test_idx),
                mean_abs_pct_error=mape,
                leakage_rows=count_leakage(samples, lineage, test_idx, cutoff),
                n_train=len(train_idx),
                n_val=len(val_idx),
                epochs=fit.epochs,
                best_epoch=fit.best_epoch,
                val_loss=fit.val_loss,
                fit_s=fit.duration_s,
                warm_start=init_state is not None,
            )
        )
        if warm_start:
            init_state, seen = fit.model.state_dict(), lineage
        else:
            init_state, seen = None, labeled[:0]
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
            "created_at": now,
        }
        for f in result.folds
    ]
    run_in_transaction(engine, lambda conn: conn.execute(insert(backtest_folds), rows))
    result.duration_s = time.perf_counter() - t0
    return result
