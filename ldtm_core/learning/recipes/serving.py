"""A global recipe's forecasts for one evening: each ticker's features on the run date, the recipe's log
return per horizon, the price it implies.

Artifacts load once per process (per path and sha256) and the file is re-hashed against the registry on
every use, as `inference.load_verified_model` does for checkpoints. A model that cannot load (its recipe's
plugin uninstalled or refused too), whose inputs raise, or that predicts NaN/inf or the wrong shape
(`TabularModel.predict` refuses them, naming the recipe), costs only its own tickers their row, each
named with the reason.
"""

from __future__ import annotations

import datetime as dt
import json
from collections import defaultdict
from pathlib import Path

import numpy as np
from sqlalchemy import Engine

from ldtm_core.errors import CheckpointError, summary
from ldtm_core.learning.checkpoints import sha256_file
from ldtm_core.learning.recipes import LSTM, artifacts
from ldtm_core.learning.recipes.family import RecipeConfig, config_from, inputs_of
from ldtm_core.learning.recipes.global_fit import panel_bars
from ldtm_core.learning.recipes.inputs import with_library
from ldtm_core.learning.recipes.tabular import TabularModel
from ldtm_core.learning.registry import ModelRecord

# Parsed models by content (sha256): a global fit's file, copied once per ticker when promoted, is parsed
# once per process; every ticker's own file is still re-hashed against its registry row on every use.
_CACHE: dict[str, TabularModel] = {}


def clear_cache() -> None:
    _CACHE.clear()


def load_verified(rec: ModelRecord) -> TabularModel:
    """The registry row's artifact, verified against its sha256 and its recipe signature."""
    if rec.checkpoint_sha256 in _CACHE:
        path = Path(rec.load_path)
        digest = sha256_file(path) if path.is_file() else None
        if digest != rec.checkpoint_sha256:
            raise CheckpointError(f"tabular model {path} is missing or does not match the registry")
        model = _CACHE[rec.checkpoint_sha256]
    else:
        model = artifacts.load(rec.load_path, rec.checkpoint_sha256)
        _CACHE[rec.checkpoint_sha256] = model
    if model.signature != rec.arch_signature:
        raise CheckpointError(f"tabular model {rec.load_path} holds another recipe than its registry row")
    return model


def cannot_run(rec: ModelRecord, exc: BaseException) -> str:
    """Why a model gives no row tonight, naming it (and its recipe, unless it is the LSTM)."""
    recipe = "" if rec.recipe == LSTM else f", recipe {rec.recipe}"
    return f"model {rec.id} ({rec.ticker}{recipe}) cannot run: {summary(exc)}"


def reads(recs: list[ModelRecord]) -> tuple[int, tuple[str, ...]]:
    """(the bars ending on the run date a row of these models reads, the context tickers to load beside
    theirs: the market their inputs read)."""
    need, context = 0, set()
    for config_json, recipe in {(r.config_json, r.recipe) for r in recs}:
        try:
            cfg = config_from(recipe, json.loads(config_json))
            inputs = inputs_of(cfg)
            need = max(need, inputs.lookback(cfg))
            context.update(inputs.context(cfg))
        except Exception:  # noqa: BLE001 - a recipe no longer installed (a plugin): its models fail alone
            continue  # in `predict`, each named with why (`artifacts.load`)
    return need, tuple(sorted(context))


def unpriced(arrays: dict[str, dict], tickers: list[str], run_date: dt.date) -> dict[str, str]:
    """{ticker: why it has no row tonight} for the tickers without a bar on the run date."""
    day = np.datetime64(run_date, "D")
    return {
        t: f"{t} has no prices up to {run_date}" if t not in arrays else f"{t} has no price on {run_date}"
        for t in tickers
        if t not in arrays or not len(arrays[t]["date"]) or arrays[t]["date"][-1] != day
    }


def feature_rows(
    arrays: dict[str, dict],
    tickers: list[str],
    run_date: dt.date,
    cfg: RecipeConfig | None = None,
    engine: Engine | None = None,
) -> tuple[dict[str, np.ndarray], dict[str, tuple[float, float | None]], dict[str, str]]:
    """({ticker: its row of recipe `cfg`'s inputs on run_date}, {ticker: (close, previous close)},
    {ticker: why skipped}); `price_features` without a recipe. `arrays` holds the context tickers too.
    With `engine`, the library's stored rows are read where the loaded bars equal the stored ones."""
    inputs = inputs_of(cfg)
    skipped = unpriced(arrays, tickers, run_date)
    present = {t: arrays[t] for t in sorted(tickers) if t not in skipped}
    lookback = inputs.lookback(cfg)
    # A row on the run date reads the `lookback` bars ending there and nothing before them.
    tails = {t: {k: v[-lookback:] for k, v in a.items()} for t, a in present.items()}
    context = {t: arrays[t] for t in inputs.context(cfg) if t in arrays}
    values = inputs.compute(with_library(engine, panel_bars(tails), inputs), cfg, context) if tails else None
    # panel_bars stacks the tickers in sorted order: each one's last row ends its block.
    ends = np.cumsum([len(a["date"]) for a in tails.values()]) - 1
    rows, closes = {}, {}
    for (t, a), end in zip(present.items(), ends, strict=True):
        last = values[end]
        if not np.isfinite(last).all():
            context_note = (
                f", and {', '.join(inputs.context(cfg))} priced then" if inputs.context(cfg) else ""
            )
            skipped[t] = (
                f"{t} has {len(a['date'])} price rows up to {run_date}; its inputs ({inputs.name}) need "
                f"{lookback} (and no empty volume or flat range{context_note})"
            )
            continue
        rows[t] = last
        closes[t] = (float(a["close"][-1]), float(a["close"][-2]) if len(a["close"]) > 1 else None)
    return rows, closes, skipped


def predict(
    recs: dict[str, ModelRecord], arrays: dict[str, dict], run_date: dt.date, engine: Engine | None = None
) -> tuple[dict[str, np.ndarray], dict[str, tuple[float, float | None]], dict[str, str], dict[str, str]]:
    """({ticker: predicted price per horizon}, {ticker: (close, previous close)}, {ticker: why the data
    left it out}, {ticker: how its model failed}); with `engine`, inputs from the `price_features`
    library read its stored rows."""
    skipped = unpriced(arrays, list(recs), run_date)
    failed: dict[str, str] = {}
    priced = [t for t in recs if t not in skipped]
    groups: dict[str, list[str]] = defaultdict(list)
    models = {}
    for t in priced:
        try:
            models[t] = load_verified(recs[t])  # each ticker's own file, verified
        except Exception as exc:  # noqa: BLE001 - an artifact that cannot load skips its own ticker only
            failed[t] = cannot_run(recs[t], exc)
            continue
        groups[recs[t].checkpoint_sha256].append(t)
    preds: dict[str, np.ndarray] = {}
    closes: dict[str, tuple[float, float | None]] = {}
    for members in groups.values():  # one batch per fit
        model = models[members[0]]
        try:
            rows, group_closes, why = feature_rows(arrays, members, run_date, model.config, engine)
        except Exception as exc:  # noqa: BLE001 - a recipe's inputs that raise cost only its own tickers
            failed.update({t: cannot_run(recs[t], exc) for t in members})
            continue
        skipped.update(why)
        closes.update(group_closes)
        members = [t for t in members if t in rows]
        if not members:
            continue
        try:
            batches = [(members, model.predict(np.stack([rows[t] for t in members])))]
        except Exception:  # noqa: BLE001 - one bad row spoils the batch: each ticker alone below
            batches = []
            for t in members:
                try:
                    batches.append(([t], model.predict(rows[t][None, :])))
                except Exception as exc:  # noqa: BLE001 - reported per ticker
                    failed[t] = cannot_run(recs[t], exc)
        for names, log_returns in batches:
            for t, r in zip(names, log_returns, strict=True):
                preds[t] = closes[t][0] * np.exp(r)
    return preds, {t: closes[t] for t in preds}, skipped, failed
