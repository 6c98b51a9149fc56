"""Hyper-parameter search with Optuna: a study per ticker, or one shared over several tickers.

Hold-out rule: the walk-forward backtest must stay out-of-sample for whatever settings the search
finds. So every trial sees only rows whose latest target date lies strictly before the backtest's
first fold cutoff, taken from `backtest.fold_spans` (the backtest's own fold geometry) and, because
the cutoff can depend on the window, the earliest over every window the search may propose. Inside
that range a trial trains on a purged chronological split (`split.purged_split`).

Objective: the validation error in price terms, the mean over rows and horizons of the squared
error of the predicted change in % of the sample's close. `fit`'s own loss is in per-window
normalised units, which shrink as the window widens (a wider window has a wider close range): a
search on it would favour long windows for nothing. Early stopping inside a trial still uses `fit`'s
loss; the pruner sees the price-terms error after every epoch.

Reproducible: the sampler is TPE seeded per trial from (seed, trial number), so a rerun with the same
seed on a fresh study proposes the same trials, and two processes sharing one study (trial numbers
are unique across them) never draw the same random start.
"""

from __future__ import annotations

import datetime as dt
import math
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields

import numpy as np
import optuna
import pandas as pd
import torch
from optuna.samplers import BaseSampler, TPESampler
from optuna.trial import TrialState

from ldtm_core.config import Settings
from ldtm_core.data.membership import load_membership
from ldtm_core.data.prices import load_ticker_prices
from ldtm_core.data.samples import SampleSet, build_samples
from ldtm_core.data.universe import validate_ticker
from ldtm_core.errors import InputError, NotFoundError
from ldtm_core.feature_names import REFERENCE_FEATURES
from ldtm_core.learning import backtest, split, training_loop
from ldtm_core.learning.model import ModelConfig, get_profile
from ldtm_core.learning.tuning_store import (
    ATTR_BASE,
    ATTR_FIXED,
    ATTR_FOLDS,
    ATTR_HOLDOUT,
    ATTR_LAST_DATE,
    ATTR_SEED,
    ATTR_TICKERS,
    TRIAL_CONFIG,
    get_storage,
    study_name,
)

# The search space over ModelConfig fields (SPEC §5 reference values lie inside every range).
WINDOWS = tuple(range(20, 91, 10))
HIDDEN_RANGE = (64, 256, 32)  # low, high, step
LAYERS_RANGE = (1, 3)
DROPOUT_RANGE = (0.0, 0.5)
LR_RANGE = (1e-4, 1e-2)  # log scale
BATCH_SIZES = (16, 32, 64, 128)
WEIGHT_DECAY_RANGE = (1e-5, 1e-1)  # log scale
SEARCHED = ("window", "hidden_size", "num_layers", "dropout", "lr", "batch_size", "weight_decay")


def suggest_config(trial: optuna.Trial, base: ModelConfig, fixed: dict) -> ModelConfig:
    """The trial's config: `base`, the fixed fields, and a suggestion for every searched field not fixed."""
    values: dict = {}
    if "window" not in fixed:
        values["window"] = trial.suggest_categorical("window", list(WINDOWS))
    if "hidden_size" not in fixed:
        lo, hi, step = HIDDEN_RANGE
        values["hidden_size"] = trial.suggest_int("hidden_size", lo, hi, step=step)
    if "num_layers" not in fixed:
        values["num_layers"] = trial.suggest_int("num_layers", *LAYERS_RANGE)
    if "dropout" not in fixed:
        values["dropout"] = trial.suggest_float("dropout", *DROPOUT_RANGE)
    if "lr" not in fixed:
        values["lr"] = trial.suggest_float("lr", *LR_RANGE, log=True)
    if "batch_size" not in fixed:
        values["batch_size"] = trial.suggest_categorical("batch_size", list(BATCH_SIZES))
    if "weight_decay" not in fixed:
        values["weight_decay"] = trial.suggest_float("weight_decay", *WEIGHT_DECAY_RANGE, log=True)
    d = base.to_dict()
    d.update(fixed)
    d.update(values)
    return ModelConfig.from_dict(d)


def candidate_windows(fixed: dict) -> tuple[int, ...]:
    return (int(fixed["window"]),) if "window" in fixed else WINDOWS


# ---------------------------------------------------------------------------------------------------
# Hold-out and the trial's data
# ---------------------------------------------------------------------------------------------------


def first_backtest_cutoff(
    samples: SampleSet, folds: int, test_sessions: int | None, ticker: str, membership=None
) -> dt.date:
    """The backtest's first fold cutoff; `membership` (data.membership.Membership) as the backtest reads it."""
    member = (
        membership.mask(ticker, samples.dates) if membership is not None and membership.has_history else None
    )
    _, spans = backtest.fold_spans(samples, folds, test_sessions, ticker, member)
    return pd.Timestamp(spans[0].cutoff).date()


def trial_split(samples: SampleSet, holdout: dt.date, val_fraction: float) -> tuple[SampleSet, SampleSet]:
    """(train, val) from the labeled rows whose every target date is strictly before `holdout`."""
    before = samples.labeled & (samples.target_dates.max(axis=1) < np.datetime64(holdout, "D"))
    pool = np.flatnonzero(before)
    sub = samples.subset(pool)
    tr, va = split.purged_split(sub, val_fraction)
    return sub.subset(tr), sub.subset(va)


class TickerData:
    """One ticker's prices, its hold-out cutoff, and recently built sample sets by window."""

    CACHE = 12

    def __init__(self, engine, ticker: str):
        self.ticker = ticker
        self.membership = load_membership(engine)
        self.prices = load_ticker_prices(engine, ticker)
        if self.prices.empty:
            raise NotFoundError(f"no prices for {ticker}; ingest them before tuning")
        self._samples: OrderedDict[tuple[int, tuple[str, ...]], SampleSet] = OrderedDict()

    def samples(self, window: int, features: tuple[str, ...] = REFERENCE_FEATURES) -> SampleSet:
        key = (window, tuple(features))
        if key in self._samples:
            self._samples.move_to_end(key)
        else:
            self._samples[key] = build_samples(self.prices, window, names=key[1])
            while len(self._samples) > self.CACHE:
                self._samples.popitem(last=False)
        return self._samples[key]

    def holdout(self, windows: Sequence[int], folds: int, test_sessions: int | None) -> dt.date:
        """The earliest first-fold cutoff of a backtest over any window the search may propose."""
        return min(
            first_backtest_cutoff(self.samples(w), folds, test_sessions, self.ticker, self.membership)
            for w in windows
        )

    def last_used(self, windows: Sequence[int], holdout: dt.date) -> dt.date | None:
        """The latest price date any trial can use: the latest target of a row `trial_split` keeps."""
        latest = None
        for w in windows:
            s = self.samples(w)
            targets = s.target_dates.max(axis=1)
            kept = s.labeled & (targets < np.datetime64(holdout, "D"))
            if kept.any():
                d = pd.Timestamp(targets[kept].max()).date()
                latest = d if latest is None else max(latest, d)
        return latest


class PriceError:
    """Validation error in price terms: mean over rows and horizons of ((pred - actual) / close in %)^2."""

    def __init__(self, val: SampleSet):
        self.val = val
        self._x: dict[torch.device, torch.Tensor] = {}
        scale = np.where(val.close_max - val.close_min > 0, val.close_max - val.close_min, 1.0)
        self._scale, self._offset = scale[:, None], val.close_min[:, None]

    @torch.no_grad()
    def __call__(self, model: torch.nn.Module) -> float:
        model.eval()
        device = next(model.parameters()).device
        if device not in self._x:
            self._x[device] = torch.from_numpy(np.ascontiguousarray(self.val.x, dtype=np.float32)).to(device)
        x = self._x[device]
        pred = torch.cat([model(x[i : i + 4096]).float() for i in range(0, len(x), 4096)]).cpu().numpy()
        prices = pred.astype(np.float64) * self._scale + self._offset
        pct = (prices - self.val.target_close) / self.val.close[:, None] * 100.0
        return float(np.mean(pct**2))


# ---------------------------------------------------------------------------------------------------
# Sampler and pruner
# ---------------------------------------------------------------------------------------------------


class TrialSeededSampler(BaseSampler):
    """TPE whose random state is derived from (seed, trial number) before every trial."""

    def __init__(self, seed: int = 0, **tpe_kwargs):
        self.seed = seed
        self._kwargs = {"constant_liar": True, **tpe_kwargs}  # workers sharing a study avoid running twins
        self._tpe = TPESampler(seed=seed, **self._kwargs)

    def _trial_seed(self, number: int) -> int:
        return (self.seed * 1_000_003 + number * 7_919 + 12_345) % (2**32)

    def before_trial(self, study, trial) -> None:
        self._tpe = TPESampler(seed=self._trial_seed(trial.number), **self._kwargs)
        self._tpe.before_trial(study, trial)

    def infer_relative_search_space(self, study, trial):
        return self._tpe.infer_relative_search_space(study, trial)

    def sample_relative(self, study, trial, search_space):
        return self._tpe.sample_relative(study, trial, search_space)

    def sample_independent(self, study, trial, param_name, param_distribution):
        return self._tpe.sample_independent(study, trial, param_name, param_distribution)

    def after_trial(self, study, trial, state, values) -> None:
        self._tpe.after_trial(study, trial, state, values)

    def reseed_rng(self) -> None:  # seeds come from trial numbers, not from a shared generator
        pass


def default_pruner() -> optuna.pruners.BasePruner:
    # Compare with trials at the same epoch once a few have finished; never before epoch 3.
    return optuna.pruners.MedianPruner(n_startup_trials=4, n_warmup_steps=2)


# ---------------------------------------------------------------------------------------------------
# The search
# ---------------------------------------------------------------------------------------------------


@dataclass
class TuneResult:
    study_name: str
    tickers: list[str]
    ran: int  # trials this call ran
    n_trials: int  # every trial in the study, any process
    n_complete: int
    n_pruned: int
    n_failed: int
    best_value: float | None
    best_number: int | None
    best_params: dict
    best_config: dict | None
    holdout: dict[str, str]
    duration_s: float


def _jsonable(fixed: dict) -> dict:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in sorted(fixed.items())}


def _check_fixed(fixed: dict) -> None:
    known = {f.name for f in fields(ModelConfig)}
    unknown = set(fixed) - known
    if unknown:
        raise InputError(f"unknown model config field(s): {', '.join(sorted(unknown))}")


def summarise(study: optuna.Study, ran: int = 0, duration_s: float = 0.0) -> TuneResult:
    trials = study.get_trials(deepcopy=False)
    complete = [t for t in trials if t.state == TrialState.COMPLETE]
    best = min(complete, key=lambda t: t.value) if complete else None
    attrs = study.user_attrs
    return TuneResult(
        study_name=study.study_name,
        tickers=list(attrs.get(ATTR_TICKERS, [])),
        ran=ran,
        n_trials=len(trials),
        n_complete=len(complete),
        n_pruned=sum(t.state == TrialState.PRUNED for t in trials),
        n_failed=sum(t.state == TrialState.FAIL for t in trials),
        best_value=best.value if best else None,
        best_number=best.number if best else None,
        best_params=dict(best.params) if best else {},
        best_config=best.user_attrs.get(TRIAL_CONFIG) if best else None,
        holdout=dict(attrs.get(ATTR_HOLDOUT, {})),
        duration_s=duration_s,
    )


def _bind_study_attrs(
    study: optuna.Study, tickers, holdout, fixed, base_profile, seed, folds
) -> dict[str, dt.date]:
    """Record the study's settings on first use; a later process must agree with them."""
    attrs = study.user_attrs
    wanted = {ATTR_FIXED: _jsonable(fixed), ATTR_BASE: base_profile, ATTR_FOLDS: folds}
    if ATTR_TICKERS not in attrs:
        study.set_user_attr(ATTR_TICKERS, list(tickers))
        study.set_user_attr(ATTR_SEED, seed)
        study.set_user_attr(ATTR_HOLDOUT, {t: d.isoformat() for t, d in holdout.items()})
        for key, value in wanted.items():
            study.set_user_attr(key, value)
        return holdout
    for key, value in wanted.items():
        if attrs.get(key) != value:
            raise InputError(
                f"study {study.study_name} was started with {key.removeprefix('ldtm_')}={attrs.get(key)!r}, "
                f"not {value!r}; tune it with the same settings (`ldtm tune show` lists them)"
            )
    stored = {t: dt.date.fromisoformat(d) for t, d in attrs[ATTR_HOLDOUT].items()}
    for t, d in holdout.items():
        if d < stored[t]:  # its data would now reach into the backtest's first fold
            raise InputError(
                f"{study.study_name}: {t}'s backtest would now start its first fold at {d}, before the "
                f"study's hold-out {stored[t]}; start a new study"
            )
    return stored


def tune(
    settings: Settings,
    tickers: Sequence[str],
    trials: int | None,
    *,
    timeout: float | None = None,
    fixed: dict | None = None,
    base_profile: str = "reference",
    seed: int = 0,
    folds: int = backtest.DEFAULT_FOLDS,
    test_sessions: int | None = None,
    device: str | None = None,
    threads: int | None = 1,
    pruner: optuna.pruners.BasePruner | None = None,
    callbacks: Sequence[Callable] = (),
    engine=None,
) -> TuneResult:
    """Run `trials` trials (or until `timeout` seconds) of the ticker's study, or one shared study."""
    from ldtm_core.db import get_engine

    t0 = time.perf_counter()
    tickers = list(dict.fromkeys(validate_ticker(t) for t in tickers))
    if not tickers:
        raise InputError("name at least one ticker to tune")
    if trials is None and timeout is None:
        raise InputError("give a number of trials, a timeout, or both")
    if trials is not None and trials < 1:
        raise InputError(f"trials must be >= 1, not {trials}")
    fixed = dict(fixed or {})
    _check_fixed(fixed)
    base = get_profile(base_profile)
    engine = engine or get_engine(settings.database_url)
    data = {t: TickerData(engine, t) for t in tickers}
    windows = candidate_windows(fixed)
    holdout = {t: d.holdout(windows, folds, test_sessions) for t, d in data.items()}

    storage = get_storage(settings.database_url)
    study = optuna.create_study(
        study_name=study_name(tickers),
        storage=storage,
        sampler=TrialSeededSampler(seed),
        pruner=pruner or default_pruner(),
        direction="minimize",
        load_if_exists=True,
    )
    holdout = _bind_study_attrs(study, tickers, holdout, fixed, base_profile, seed, folds)
    if ATTR_LAST_DATE not in study.user_attrs:  # also for a study started before it was recorded
        last = {t: data[t].last_used(windows, holdout[t]) for t in tickers}
        study.set_user_attr(ATTR_LAST_DATE, {t: d.isoformat() for t, d in last.items() if d is not None})

    def objective(trial: optuna.Trial) -> float:
        cfg = suggest_config(trial, base, fixed)
        trial.set_user_attr(TRIAL_CONFIG, cfg.to_dict())
        errors = []
        for i, ticker in enumerate(tickers):
            train, val = trial_split(
                data[ticker].samples(cfg.window, cfg.features), holdout[ticker], cfg.val_fraction
            )
            if len(train) < max(cfg.batch_size, 2) or len(val) == 0:
                raise optuna.TrialPruned(
                    f"{ticker}: too little history before {holdout[ticker]} for window {cfg.window} "
                    f"({len(train)} training / {len(val)} validation rows)"
                )
            error_of = PriceError(val)
            offset = i * cfg.max_epochs  # shared study: each ticker's epochs are their own steps

            def on_epoch(
                epoch: int, _loss: float, model, error_of=error_of, offset=offset, ticker=ticker
            ) -> None:
                trial.report(error_of(model), offset + epoch)
                if trial.should_prune():
                    raise optuna.TrialPruned(f"{ticker} at epoch {epoch}")

            fit = training_loop.fit(train, val, cfg, device=device, threads=threads, on_epoch=on_epoch)
            errors.append(error_of(fit.model))
            trial.set_user_attr(f"val_error_{ticker}", errors[-1])
            trial.set_user_attr(f"epochs_{ticker}", fit.epochs)
        value = float(np.mean(errors))
        if not math.isfinite(value):
            raise training_loop.TrainingError(f"non-finite validation error {value}")
        return value

    ran = 0

    def count(_study, _trial) -> None:
        nonlocal ran
        ran += 1

    study.optimize(
        objective,
        n_trials=trials,
        timeout=timeout,
        catch=(training_loop.TrainingError,),  # a diverging lr fails its trial, not the search
        callbacks=[count, *callbacks],
        gc_after_trial=False,
    )
    return summarise(study, ran=ran, duration_s=time.perf_counter() - t0)


def importances(study: optuna.Study) -> dict[str, float]:
    """Each searched parameter's importance (Optuna's default evaluator); empty below two finished trials."""
    complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    if len(complete) < 2:
        return {}
    return dict(optuna.importance.get_param_importances(study))
