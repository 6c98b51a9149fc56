"""Training a global recipe: one fit on every member ticker's rows, one artifact, a candidate per ticker.

Bars up to `as_of` (the exchange's today by default) for the pool -> the panel's features and
targets (`tabular.training_frame`: a row is kept only once all its targets are known, so nothing after
`as_of` is read) -> one fit -> one sha256-verified JSON artifact -> one `candidate` registry row per
ticker asked for with enough rows of its own, all in one transaction. The pool is the member universe
at `as_of` (LDTM_UNIVERSE's tickers that are members then, and those asked for), whatever `tickers`
lists, so the same config fits the same rows; it is stored with each model (`fit_pool`) and printed. A fit that raises, predicts NaN/inf or the
wrong shape on its own training rows writes nothing: every ticker is reported failed, by recipe name.
"""

from __future__ import annotations

import datetime as dt
import json
import time
import uuid
from pathlib import Path

import pandas as pd
from sqlalchemy import Engine

from ldtm_core.config import Settings, mask_secrets
from ldtm_core.data.calendar import target_dates
from ldtm_core.errors import InputError, LDTMError
from ldtm_core.horizons import HORIZONS
from ldtm_core.learning.price_windows import PRICE_FIELDS, load_price_arrays
from ldtm_core.learning.recipes import get
from ldtm_core.learning.recipes.family import RecipeConfig, family, inputs_of
from ldtm_core.learning.recipes.inputs import with_library
from ldtm_core.learning.training import MIN_LABELED_SAMPLES, TrainOutcome


def recipe_config(name: str, overrides: dict | None = None) -> RecipeConfig:
    """The config of global recipe `name` with `overrides` (`training.parse_overrides`) applied."""
    get(name)  # an unknown name is refused listing every recipe
    if "kind" in (overrides or {}):
        raise InputError("--set kind: the recipe is chosen with --recipe")
    config = family(name).config
    return config.from_dict({**config().to_dict(), **(overrides or {}), "kind": name})


def panel_bars(arrays: dict[str, dict]) -> pd.DataFrame:
    """`load_price_arrays`' {ticker: arrays} as one frame (ticker, date, open, high, low, close, volume),
    each ticker's rows in date order."""
    frames = [
        pd.DataFrame({"ticker": t, "date": a["date"], **{f: a[f] for f in PRICE_FIELDS}})
        for t, a in sorted(arrays.items())
        if len(a["date"])
    ]
    if not frames:
        return pd.DataFrame(columns=["ticker", "date", *PRICE_FIELDS])
    return pd.concat(frames, ignore_index=True)


def context_arrays(engine: Engine, cfg: RecipeConfig, start: dt.date | None, stop: dt.date) -> dict:
    """The bars of the tickers recipe `cfg`'s inputs read beside each row's own (the market), up to `stop`."""
    wanted = list(inputs_of(cfg).context(cfg))
    return load_price_arrays(engine, wanted, start, stop) if wanted and start else {}


def ticker_inputs(engine: Engine, rec) -> pd.DataFrame:
    """Recipe model `rec`'s inputs for its own ticker on every priced date (index: the date), the rows
    whose inputs are all known (what it read at its fit, and reads each evening since)."""
    from ldtm_core.data.prices import earliest_price_date, latest_price_date
    from ldtm_core.learning.recipes.family import config_from

    cfg = config_from(rec.recipe, json.loads(rec.config_json))
    start, stop = earliest_price_date(engine, [rec.ticker]), latest_price_date(engine, [rec.ticker])
    if start is None or stop is None:
        return pd.DataFrame(columns=list(inputs_of(cfg).names(cfg)))
    bars = with_library(
        engine, panel_bars(load_price_arrays(engine, [rec.ticker], start, stop)), inputs_of(cfg)
    )
    frame = inputs_of(cfg).frame(bars, cfg, context_arrays(engine, cfg, start, stop))
    frame.index = pd.to_datetime(bars["date"]).dt.date
    return frame.dropna()


POOL_KEY = "pool"  # the key of a global model's metrics JSON that lists the tickers its fit pooled


def fit_pool(engine: Engine, model_id: int) -> list[str] | None:
    """The tickers whose rows model `model_id`'s fit pooled (None: a fit registered before pools were
    stored, whose pool is the tickers registered on its artifact)."""
    from sqlalchemy import select

    from ldtm_core.schema import model_registry

    with engine.connect() as conn:
        text = conn.execute(
            select(model_registry.c.metrics_json).where(model_registry.c.id == model_id)
        ).scalar_one_or_none()
    pool = json.loads(text or "{}").get(POOL_KEY)
    return list(pool) if isinstance(pool, list) else None


def artifact_path(settings: Settings, name: str, trained_on: dt.date, signature: str) -> Path:
    stem = f"{name}_{trained_on.isoformat()}_{signature[:12]}_{uuid.uuid4().hex[:8]}.json"
    return settings.checkpoint_dir / "recipes" / name / stem


def train_global(
    engine: Engine,
    settings: Settings,
    name: str,
    tickers: list[str],
    as_of: dt.date | None = None,
    overrides: dict | None = None,
) -> list[TrainOutcome]:
    """Fit recipe `name` once on `tickers` and register a candidate for each ticker it can serve.

    Never raises for the run's data or the recipe's failure: each ticker gets an outcome (trained,
    skipped with why, or failed with what went wrong, naming the recipe)."""
    from ldtm_core.data.calendar import market_today
    from ldtm_core.data.membership import load_membership
    from ldtm_core.data.prices import earliest_price_date
    from ldtm_core.data.universe import load_universe
    from ldtm_core.learning.recipes import artifacts, budget, tabular
    from ldtm_core.learning.registry import register_candidates

    t0 = time.perf_counter()
    cfg = recipe_config(name, overrides)
    day = as_of or market_today()
    membership = load_membership(engine)
    outcomes = {
        t: TrainOutcome(t, "skipped", reason=membership.why_not(t, day))
        for t in tickers
        if not membership.is_member(t, day)
    }
    members = [t for t in tickers if t not in outcomes]
    universe = [t for t in load_universe(settings.universe) if membership.is_member(t, day)]
    pool = sorted({*universe, *members}) if members else []
    start = earliest_price_date(engine, pool) if pool else None
    arrays = load_price_arrays(engine, pool, start, day) if start else {}
    written: Path | None = None
    try:
        context = context_arrays(engine, cfg, start, day)
        unread = [t for t in inputs_of(cfg).context(cfg) if t not in context]
        if unread and members:
            raise InputError(f"its inputs read {', '.join(unread)}, which has no prices up to {day}")
        bars = with_library(engine, panel_bars(arrays), inputs_of(cfg))
        x, y, keys = tabular.training_frame(bars, cfg, context)
        rows = keys["ticker"].value_counts()
        for t in members:
            n = int(rows.get(t, 0))
            if n < MIN_LABELED_SAMPLES:
                outcomes[t] = TrainOutcome(
                    t,
                    "skipped",
                    reason=f"too little history for {name}: {n} complete rows up to {day}, need "
                    f"{MIN_LABELED_SAMPLES}",
                )
        served = [t for t in members if t not in outcomes]
        if not served:
            return [outcomes[t] for t in tickers]
        model = budget.fit(x, y, cfg)  # in-process, or within LDTM_RECIPE_FIT_* in a child
        model.predict(x.iloc[-min(len(x), 1024) :])  # its own rows: NaN/inf or a wrong shape is refused
        # The data cutoff: the latest target date any training row read (its one-month answer).
        days = pd.to_datetime(keys["date"]).to_numpy().astype("datetime64[D]")
        trained_on = pd.Timestamp(target_dates(days)[HORIZONS[-1].name].max()).date()
        path = artifact_path(settings, name, trained_on, cfg.signature)
        sha = artifacts.save(model, path)
        written = path
        duration = time.perf_counter() - t0
        ids = register_candidates(
            engine,
            tickers=served,
            cfg=cfg,
            recipe=name,
            profile=name,
            trained_on_date=trained_on,
            checkpoint_path=str(path),
            checkpoint_sha256=sha,
            val_loss=None,
            device="cpu",
            duration_s=duration,
            metrics={
                "n_train": len(x),
                "tickers_fitted": int(rows.size),
                "first_date": str(days.min()),
                POOL_KEY: sorted(rows.index),  # the tickers whose rows were fitted
            },
        )
        written = None  # registered: the registry owns the file now
        for t in served:
            outcomes[t] = TrainOutcome(
                t,
                "trained",
                model_id=ids[t],
                device="cpu",
                duration_s=duration,
                profile=name,
                checkpoint_path=str(path),
                features=inputs_of(cfg).name,
            )
    except Exception as exc:  # noqa: BLE001 - the recipe's failure is every ticker's outcome, never a crash
        what = str(exc) if isinstance(exc, LDTMError) else f"{type(exc).__name__}: {exc}"
        first = mask_secrets(what, settings.database_url).strip().splitlines() or [type(exc).__name__]
        # Named once: an error from the recipe's own budget already starts "recipe <name>: ".
        reason = first[0] if first[0].startswith(f"recipe {name}: ") else f"recipe {name}: {first[0]}"
        for t in members:
            if outcomes.get(t) is None:
                outcomes[t] = TrainOutcome(t, "failed", reason=reason)
    finally:
        if written is not None:  # never registered: no orphan artifact
            written.unlink(missing_ok=True)
    duration = time.perf_counter() - t0
    for o in outcomes.values():
        o.duration_s = o.duration_s or duration
    return [outcomes[t] for t in tickers]
