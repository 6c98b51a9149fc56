"""Training one ticker's model from the database to a registered candidate (SPEC §5).

The split lives in `split`, the fit loop in `training_loop`; this module is the path around them:
prices -> samples -> fit -> checkpoint -> candidate row, plus `--set key=value` overrides.
"""

from __future__ import annotations

import datetime as dt
import time
import uuid
from dataclasses import dataclass, fields
from pathlib import Path

import numpy as np

from ldtm_core.config import Settings, mask_secrets
from ldtm_core.data.samples import build_samples
from ldtm_core.data.universe import validate_ticker
from ldtm_core.errors import InputError, LDTMError
from ldtm_core.faults import pause_point
from ldtm_core.learning import training_loop
from ldtm_core.learning.checkpoints import save_checkpoint
from ldtm_core.learning.model import ModelConfig
from ldtm_core.learning.split import purged_split
from ldtm_core.learning.warm_start import active_weights

# ---------------------------------------------------------------------------------------------------
# Overrides
# ---------------------------------------------------------------------------------------------------


def parse_overrides(pairs: list[str] | None, config_cls=ModelConfig) -> dict:
    """`["hidden_size=64", "amp=off"]` -> typed dict of `config_cls` (a recipe's config dataclass, the
    LSTM's by default) fields; unknown fields or unparsable values are refused."""
    out: dict = {}
    types = {f.name: f.type for f in fields(config_cls)}
    defaults = config_cls()
    for pair in pairs or []:
        if "=" not in pair:
            raise InputError(f"--set {pair!r}: expected key=value")
        key, raw = (s.strip() for s in pair.split("=", 1))
        if key == "input_size":
            raise InputError(
                f"--set {key}: not configurable; it is the number of features (--set features=...)"
            )
        if key not in types:
            raise InputError(f"--set {key}: unknown {config_cls.__name__} field; known: {', '.join(types)}")
        current = getattr(defaults, key)
        try:
            if isinstance(current, bool):
                low = raw.lower()
                if low not in ("true", "false", "1", "0", "yes", "no", "on", "off"):
                    raise ValueError(raw)
                value = low in ("true", "1", "yes", "on")
            elif isinstance(current, int):
                value = int(raw)
            elif isinstance(current, float):
                value = float(raw)
            elif isinstance(current, tuple):
                value = tuple(s.strip() for s in raw.split(",") if s.strip())
            else:
                value = raw
        except ValueError:
            raise InputError(f"--set {key}={raw!r}: expected a {type(current).__name__}") from None
        out[key] = value
    return out


# ---------------------------------------------------------------------------------------------------
# One ticker, database to registry
# ---------------------------------------------------------------------------------------------------


@dataclass
class TrainOutcome:
    ticker: str
    status: str  # 'trained' | 'skipped' | 'failed'
    model_id: int | None = None
    device: str | None = None
    duration_s: float = 0.0
    epochs: int | None = None
    val_loss: float | None = None
    reason: str = ""
    checkpoint_path: str | None = None
    profile: str | None = None  # the settings it was trained with: 'tuned' or the named profile
    features: str = ""  # "stored" or "recomputed (why)": see feature_store.prices_and_features


# Four batches / one batch of the seed's 32: fixed counts, so a recipe with bigger batches (the reference
# profile's 128 now) turns away no ticker that trained before (a short epoch is one partial batch).
MIN_LABELED_SAMPLES = 128
MIN_TRAIN_ROWS = 32


def checkpoint_path_for(settings: Settings, ticker: str, trained_on: dt.date, cfg: ModelConfig) -> Path:
    name = f"{ticker}_{trained_on.isoformat()}_{cfg.signature}_{uuid.uuid4().hex[:8]}.pt"
    return settings.checkpoint_dir / "candidates" / ticker / name


def train_ticker(
    engine,
    settings: Settings,
    ticker: str,
    cfg: ModelConfig,
    profile: str,
    as_of: dt.date | None = None,
    device: str | None = None,
    threads: int | None = None,
    provenance: dict | None = None,
    warm_start: bool = False,
) -> TrainOutcome:
    """Prices up to `as_of` -> samples -> fit -> checkpoint -> candidate row. Never raises for one ticker.

    `provenance` (e.g. the study and trial a tuned config came from) is recorded in the row's metrics.
    `warm_start` fine-tunes the ticker's active model when its architecture matches `cfg`.
    """
    from ldtm_core.data.calendar import market_today
    from ldtm_core.data.feature_store import prices_and_features
    from ldtm_core.data.membership import load_membership
    from ldtm_core.learning.registry import register_candidate

    t0 = time.perf_counter()
    written: Path | None = None
    try:
        ticker = validate_ticker(ticker)
        prices, feats = prices_and_features(engine, ticker, end=as_of, features=cfg.features)
        if prices.empty:
            return TrainOutcome(
                ticker,
                "skipped",
                reason="no prices" + (f" up to {as_of}" if as_of else ""),
                duration_s=time.perf_counter() - t0,
            )
        # A dated universe (data.membership): only a member on the training day gets a model. Its price
        # history before it joined was public then, so it is still learned from.
        day = as_of or market_today()
        membership = load_membership(engine)
        if not membership.is_member(ticker, day):
            return TrainOutcome(
                ticker, "skipped", reason=membership.why_not(ticker, day), duration_s=time.perf_counter() - t0
            )
        samples = build_samples(prices, cfg.window, features=feats.frame, names=cfg.features)
        n_labeled = int(samples.labeled.sum())
        need = MIN_LABELED_SAMPLES
        if n_labeled < need:
            return TrainOutcome(
                ticker,
                "skipped",
                reason=f"too little history: {n_labeled} labeled samples from {len(prices)} price rows, need {need}",
                duration_s=time.perf_counter() - t0,
            )
        train_idx, val_idx = purged_split(samples, cfg.val_fraction)
        if len(val_idx) == 0 or len(train_idx) < MIN_TRAIN_ROWS:
            return TrainOutcome(
                ticker,
                "skipped",
                reason=f"too little history after the purged split: {len(train_idx)} train / {len(val_idx)} val rows",
                duration_s=time.perf_counter() - t0,
            )
        used = np.concatenate([train_idx, val_idx])
        bad = ~np.isfinite(samples.x[used]).all(axis=(1, 2))
        if bad.any():
            first = samples.dates[used[bad]].min()
            raise InputError(
                f"{ticker}: {int(bad.sum())} windows hold non-finite features (first ending {first}); "
                "check its prices for zero or missing values"
            )
        warm = active_weights(engine, ticker, cfg) if warm_start else None
        result = training_loop.fit(  # a module attribute: the one place tests replace the fit
            samples.subset(train_idx),
            samples.subset(val_idx),
            cfg,
            device=device,
            threads=threads,
            init_state=warm.state if warm else None,
        )
        # The data cutoff: the last date whose price any training or early-stopping row used, i.e. the
        # latest target date (a validation sample's one-month target lies 21 sessions past its date).
        trained_on = dt.date.fromisoformat(str(samples.target_dates[used].max()))
        path = checkpoint_path_for(settings, ticker, trained_on, cfg)
        metrics = {
            "train_loss": result.train_loss,
            "best_epoch": result.best_epoch,
            "n_train": result.n_train,
            "n_val": result.n_val,
            "samples_per_s": result.samples_per_s,
            "first_val_date": str(samples.dates[val_idx[0]]),
            **(provenance or {}),
            "precision": result.precision,
            "warm_start_from": warm.model_id if warm else None,
        }
        sha = save_checkpoint(path, result.model, cfg, ticker, trained_on, result.val_loss, metrics)
        written = path
        pause_point("train.before_register")
        duration = time.perf_counter() - t0
        model_id = register_candidate(
            engine,
            ticker=ticker,
            cfg=cfg,
            profile=profile,
            trained_on_date=trained_on,
            checkpoint_path=str(path),
            checkpoint_sha256=sha,
            val_loss=result.val_loss,
            epochs=result.epochs,
            device=result.device,
            duration_s=duration,
            metrics=metrics,
        )
        written = None  # registered: the file is now owned by the registry
        return TrainOutcome(
            ticker,
            "trained",
            model_id=model_id,
            device=result.device,
            duration_s=duration,
            epochs=result.epochs,
            val_loss=result.val_loss,
            checkpoint_path=str(path),
            profile=profile,
            features=feats.describe(),
        )
    except Exception as exc:  # noqa: BLE001 - one ticker's failure is reported, never raised
        message = mask_secrets(
            f"{type(exc).__name__}: {exc}" if not isinstance(exc, LDTMError) else str(exc),
            settings.database_url,
        )
        return TrainOutcome(
            str(ticker),
            "failed",
            reason=message.strip().splitlines()[0] if message.strip() else type(exc).__name__,
            duration_s=time.perf_counter() - t0,
        )
    finally:
        # A checkpoint that never made it into the registry is removed: no orphan files.
        if written is not None:
            written.unlink(missing_ok=True)
