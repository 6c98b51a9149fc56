"""A global recipe's forecasts for one evening: each ticker's features on the run date, the recipe's log
return per horizon, the price it implies.

Artifacts load once per process (per path and sha256) and the file is re-hashed against the registry on
every use, as `inference.load_verified_model` does for checkpoints. A model that cannot load, or predicts
NaN/inf or the wrong shape, costs only its own tickers their row, each named with the reason.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from pathlib import Path

import numpy as np

from ldtm_core.data import price_features
from ldtm_core.errors import CheckpointError
from ldtm_core.learning.checkpoints import sha256_file
from ldtm_core.learning.recipes import artifacts
from ldtm_core.learning.recipes.global_fit import panel_bars
from ldtm_core.learning.recipes.tabular import TabularModel
from ldtm_core.learning.registry import ModelRecord

_CACHE: dict[tuple[str, str], TabularModel] = {}


def clear_cache() -> None:
    _CACHE.clear()


def load_verified(rec: ModelRecord) -> TabularModel:
    """The registry row's artifact, verified against its sha256 and its recipe signature."""
    key = (rec.load_path, rec.checkpoint_sha256)
    if key in _CACHE:
        digest = sha256_file(rec.load_path) if Path(rec.load_path).is_file() else None
        if digest != rec.checkpoint_sha256:
            raise CheckpointError(
                f"tabular model {rec.load_path} is missing or no longer matches the registry"
            )
        return _CACHE[key]
    model = artifacts.load(rec.load_path, rec.checkpoint_sha256)
    if model.signature != rec.arch_signature:
        raise CheckpointError(f"tabular model {rec.load_path} holds another recipe than its registry row")
    _CACHE[key] = model
    return model


def cannot_run(rec: ModelRecord, exc: BaseException) -> str:
    detail = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"model {rec.id} ({rec.ticker}, recipe {rec.recipe}) cannot run: {type(exc).__name__}" + (
        f": {detail}" if detail else ""
    )


def feature_rows(
    arrays: dict[str, dict], tickers: list[str], run_date: dt.date
) -> tuple[dict[str, np.ndarray], dict[str, tuple[float, float | None]], dict[str, str]]:
    """({ticker: its feature row on run_date}, {ticker: (close, previous close)}, {ticker: why skipped})."""
    skipped = {t: f"{t} has no prices up to {run_date}" for t in tickers if t not in arrays}
    present = {t: arrays[t] for t in tickers if t in arrays}
    frame = price_features.compute_panel(panel_bars(present)) if present else None
    rows, closes = {}, {}
    day = np.datetime64(run_date, "D")
    names = list(price_features.feature_names())
    for t, a in present.items():
        if not len(a["date"]) or a["date"][-1] != day:
            skipped[t] = f"{t} has no price on {run_date}"
            continue
        last = frame.loc[frame["ticker"] == t, names].to_numpy(dtype=np.float64)[-1]
        if not np.isfinite(last).all():
            skipped[t] = (
                f"{t} has {len(a['date'])} price rows up to {run_date}; its features need "
                f"{price_features.LOOKBACK} (and no empty volume or flat range)"
            )
            continue
        rows[t] = last
        closes[t] = (float(a["close"][-1]), float(a["close"][-2]) if len(a["close"]) > 1 else None)
    return rows, closes, skipped


def predict(
    recs: dict[str, ModelRecord], arrays: dict[str, dict], run_date: dt.date
) -> tuple[dict[str, np.ndarray], dict[str, tuple[float, float | None]], dict[str, str]]:
    """({ticker: predicted price per horizon}, {ticker: (close, previous close)}, {ticker: why not})."""
    rows, closes, skipped = feature_rows(arrays, list(recs), run_date)
    groups: dict[tuple[str, str], list[str]] = defaultdict(list)
    for t in rows:
        groups[(recs[t].load_path, recs[t].checkpoint_sha256)].append(t)
    preds: dict[str, np.ndarray] = {}
    for members in groups.values():
        try:
            model = load_verified(recs[members[0]])
        except Exception as exc:  # noqa: BLE001 - an artifact that cannot load skips its own tickers only
            skipped.update({t: cannot_run(recs[t], exc) for t in members})
            continue
        try:
            batches = [(members, model.predict(np.stack([rows[t] for t in members])))]
        except Exception:  # noqa: BLE001 - one bad row spoils the batch: each ticker alone below
            batches = []
            for t in members:
                try:
                    batches.append(([t], model.predict(rows[t][None, :])))
                except Exception as exc:  # noqa: BLE001 - reported per ticker
                    skipped[t] = cannot_run(recs[t], exc)
        for names, log_returns in batches:
            for t, r in zip(names, log_returns, strict=True):
                preds[t] = closes[t][0] * np.exp(r)
    return preds, {t: closes[t] for t in preds}, skipped
