"""Snapshots (SPEC §7): one recorded, hash-chained prediction row per ticker per evening and model.

`predict` reads every window with one prices query (price_windows), loads each checkpoint once
(verified against the registry, inference), runs one batched forward pass per architecture, and writes
all rows and the chain anchors in one transaction (chain). Rows already present for
(ticker, run_date, model_version) are left alone: a rerun is a no-op. A later model may add its own
row for an evening already predicted; the leaderboard scores only the first (what was published).

A ticker whose active champion has a shadow challenger (accountability.shadow) gets a second row from
the shadow, `model_status = 'shadow'`, chained right after the champion's in the same transaction;
it is never the published forecast (the boards and the run's cohort leave it out). A shadow that
cannot run is named in `shadow_skipped` and never costs the ticker its published row; the conclusion
step (accountability.shadow.conclude) ends a shadow whose checkpoint no longer loads, so a skipped
shadow cannot hold its ticker for ever.

A replayed evening whose next-day target date is on or before the model's data cutoff
(`trained_on_date`) is stored flagged `in_sample`: the model may have trained on the answer.

A ticker that was not a member of the universe on the run date (a stored membership history,
data.membership) is not predicted, live or replayed: it is named in `not_members` with the reason (run
log summary, CLI, Dagster metadata), which is no failure of the run. Its earlier rows stay in the record.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import torch
from sqlalchemy import Engine, and_, select

from ldtm_core.accountability.ledger import receipts, runlog
from ldtm_core.accountability.ledger.chain import write_rows_anchored
from ldtm_core.config import NUMERIC_SETTINGS, Settings, check_number
from ldtm_core.data import feature_store
from ldtm_core.data.calendar import MARKET_TZ, has_closed, is_session, session_close, target_dates
from ldtm_core.data.features import warmup_rows
from ldtm_core.data.membership import load_membership
from ldtm_core.data.prices import earliest_price_date, latest_price_date
from ldtm_core.data.samples import denormalise
from ldtm_core.data.universe import validate_ticker
from ldtm_core.errors import CheckpointError, InputError, NotFoundError
from ldtm_core.faults import pause_point
from ldtm_core.horizons import DIRECTION, HORIZONS
from ldtm_core.learning.checkpoints import Weights
from ldtm_core.learning.inference import batched_forward, load_verified_model
from ldtm_core.learning.price_windows import (
    RSI_SETTLE_ROWS,
    build_windows,
    load_price_arrays,
    normalised_window,
    start_for,
)
from ldtm_core.learning.recipes import LSTM
from ldtm_core.learning.recipes import serving as recipe_serving
from ldtm_core.learning.registry import (
    EXTERNAL,
    SHADOW,
    ModelRecord,
    activation_history,
    get_model,
    serving_models,
    shadow_models,
)
from ldtm_core.schema import model_registry, prices, snapshots
from ldtm_core.scoring import baselines

DIRECTIONS = ("bullish", "neutral", "bearish")
log = logging.getLogger("ldtm.predict")


def classify_direction(value, close, band_pct: float) -> np.ndarray:
    """bullish / neutral / bearish for `value` vs `close`; the band (in %) is inclusive of neutral."""
    pct = (
        (np.asarray(value, dtype=np.float64) - np.asarray(close, dtype=np.float64))
        / np.asarray(close)
        * 100.0
    )
    return np.where(pct > band_pct, "bullish", np.where(pct < -band_pct, "bearish", "neutral"))


@dataclass
class _Input:
    ticker: str
    model: ModelRecord
    x: np.ndarray  # [W, F] normalised
    close_min: float
    close_max: float
    close: float
    prev_close: float | None


@dataclass
class PredictResult:
    run_id: str
    run_date: dt.date
    mode: str
    rows_written: int = 0
    rows_existing: int = 0
    tickers_predicted: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    # Of the skipped tickers, those whose model failed (would not load or run, predicted NaN or the wrong shape),
    # as opposed to those the data left out: the run is partial (`ldtm predict` exits 1).
    failed: dict[str, str] = field(default_factory=dict)
    # Tickers with a model that were not members of the universe on the run date (universe_membership),
    # with the reason: not predicted, and no failure (a replay never uses today's list for the past).
    not_members: dict[str, str] = field(default_factory=dict)
    # Production's cohort: rows of active (gated) models. Candidates' rows are counted apart.
    cohort: dict[str, int] = field(default_factory=lambda: dict.fromkeys(DIRECTIONS, 0))
    cohort_ungated: dict[str, int] = field(default_factory=lambda: dict.fromkeys(DIRECTIONS, 0))
    phases: dict[str, float] = field(default_factory=dict)
    used_candidate: list[str] = field(default_factory=list)
    features_recomputed: dict[str, str] = field(default_factory=dict)  # ticker -> why stored were not used
    in_sample: list[str] = field(default_factory=list)
    model_versions: dict[str, str] = field(default_factory=dict)  # {ticker: model_version written}
    shadow: dict[str, str] = field(default_factory=dict)  # {ticker: the shadow's model_version written}
    shadow_skipped: dict[str, str] = field(default_factory=dict)  # {ticker: why its shadow did not run}
    # Tickers whose champion is a submitted model (accountability.submissions): its row was submitted
    # ({ticker: version}), or it was missing and the previous champion published ({ticker: why}).
    submitted: dict[str, str] = field(default_factory=dict)
    submission_missing: dict[str, str] = field(default_factory=dict)
    # The anchor stored in run_log: {"keyed": bool, "heads": {ticker: [id, row_hash, run_date, version]}}
    chain_heads: dict = field(default_factory=dict)
    receipt: receipts.Receipt | None = None  # the evening's signed receipt, where receipts are configured

    def summary(self) -> dict:
        return {
            "run_date": self.run_date.isoformat(),
            "mode": self.mode,
            "rows_written": self.rows_written,
            "rows_existing": self.rows_existing,
            "predicted": len(self.tickers_predicted),
            "cohort": self.cohort,
            "cohort_ungated": self.cohort_ungated,
            "ungated": self.used_candidate,
            "skipped": self.skipped,
            "failed": self.failed,
            "not_members": self.not_members,
            "used_candidate": self.used_candidate,
            "features_recomputed": self.features_recomputed,
            "in_sample": self.in_sample,
            "shadow": self.shadow,
            "shadow_skipped": self.shadow_skipped,
            "submitted": self.submitted,
            "submission_missing": self.submission_missing,
            "receipt": self.receipt.path.name if self.receipt else None,
        }


# --- predict --------------------------------------------------------------------------------------


def predict(
    engine: Engine,
    settings: Settings,
    run_date: dt.date | None = None,
    tickers: Sequence[str] | None = None,
    mode: str | None = None,
    neutral_band_pct: float | None = None,
) -> PredictResult:
    """Predict every horizon for every ticker with a model and record them (see module doc)."""
    if mode is not None and mode not in ("live", "replay"):
        raise InputError(f"mode must be 'live' or 'replay', not {mode!r}")
    band = (
        settings.neutral_band_pct
        if neutral_band_pct is None  # NaN/inf would judge every move "neutral" into the chain
        else check_number("neutral band", neutral_band_pct, NUMERIC_SETTINGS["LDTM_NEUTRAL_BAND_PCT"])
    )
    t0 = time.perf_counter()
    if tickers is not None:
        tickers = list(dict.fromkeys(validate_ticker(t) for t in tickers))
    models = serving_models(engine, tickers)
    wanted = list(tickers) if tickers is not None else sorted(models)
    if not models:  # nothing could be predicted: refuse before recording a run
        raise NotFoundError(
            f"no active or candidate model for {', '.join(wanted) if wanted else 'any ticker'}: train models first"
        )
    latest = latest_price_date(engine, list(models))
    if run_date is None:
        if latest is None:
            raise NotFoundError("no prices for any ticker with a model: ingest prices and train models first")
        run_date = latest
    if isinstance(run_date, dt.datetime):
        run_date = run_date.date()
    if not is_session(run_date):
        raise InputError(f"run date {run_date} is not an XNYS trading session")
    if latest is None or run_date > latest or not _has_prices_on(engine, list(models), run_date):
        earliest = earliest_price_date(engine, list(models)) if latest is not None else None
        if earliest is not None and run_date < earliest:  # name the bound it is past, not the other one
            where = f"it is before the earliest close ({earliest})"
        else:
            where = "no ticker with a model has a close on it" + (
                f" (latest close {latest})" if latest else ""
            )
        raise InputError(f"run date {run_date} is outside the price data: {where}")
    if mode is None:
        mode = "replay" if run_date < latest else "live"
    if mode == "live" and not has_closed(run_date):
        # A bar for a session still trading (or not yet open) is no close to predict from.
        raise InputError(
            f"live prediction refused for {run_date}: that session has not closed yet (close "
            f"{session_close(run_date).astimezone(MARKET_TZ):%Y-%m-%d %H:%M} New York); the stored "
            f"bar for it is not a final close"
        )
    elif mode == "live" and run_date < latest:
        # A live row claims the answer was unknown when it was written; later prices say otherwise.
        raise InputError(
            f"--mode live refused for {run_date}: prices up to {latest} already exist, so the outcome "
            "is known; record it as a replay (--mode replay, or no --mode)"
        )
    receipt_settings = receipts.ready()  # checked before anything is written: no row left uncovered
    result = PredictResult(run_id=str(uuid.uuid4()), run_date=run_date, mode=mode)
    runlog.start(engine, "predict", run_date, wanted, run_id=result.run_id)
    try:
        _predict(engine, result, models, wanted, band, t0)
        # The evening's signed receipt outside the database (when configured): a failure fails the run.
        result.receipt = receipts.after_predict(engine, receipt_settings)
    except BaseException as exc:
        runlog.finish(
            engine, result.run_id, "failed", phases=result.phases, message=runlog.failure_message(exc)
        )
        raise
    status = "ok" if not result.skipped else ("partial" if result.tickers_predicted else "failed")
    runlog.finish(
        engine,
        result.run_id,
        status,
        n_rows=result.rows_written,
        phases=result.phases,
        summary=result.summary(),
        tickers=result.tickers_predicted,
        message=runlog.skipped_message(result.skipped, len(wanted)) if result.skipped else None,
    )
    return result


def _has_prices_on(engine: Engine, tickers: list[str], day: dt.date) -> bool:
    with engine.connect() as conn:
        return (
            conn.execute(
                select(prices.c.ticker).where(prices.c.ticker.in_(tickers), prices.c.date == day).limit(1)
            ).first()
            is not None
        )


def _predict(
    engine: Engine,
    result: PredictResult,
    models: dict[str, ModelRecord],
    wanted: list[str],
    band: float,
    t0: float,
) -> None:
    run_date = result.run_date
    membership = load_membership(engine)
    for t in wanted:
        if t not in models:
            result.skipped[t] = f"{t} has no active or candidate model"
        elif not membership.is_member(t, run_date):
            result.not_members[t] = membership.why_not(t, run_date)
            log.info("predict %s: %s not predicted: %s", run_date, t, result.not_members[t])
    todo = [t for t in wanted if t in models and t not in result.not_members]
    todo = _submitted_champions(engine, result, models, todo)
    # Global recipes' models (learning.recipes) are served from their artifacts; the LSTMs below.
    by_recipe = {t: models[t] for t in todo if models[t].recipe != LSTM}
    todo = [t for t in todo if t not in by_recipe]

    # load: one prices query, each checkpoint once
    loaded: dict[str, tuple[ModelRecord, Weights]] = {}
    for t in todo:
        try:
            loaded[t] = (models[t], load_verified_model(models[t], t))
        except CheckpointError as exc:
            result.failed[t] = str(exc)
        except Exception as exc:  # noqa: BLE001 - one model that cannot load must not stop the others
            result.failed[t] = recipe_serving.cannot_run(models[t], exc)
    # A shadow predicts only beside an active champion that loaded (never as the ticker's only row).
    shadow_loaded: dict[str, tuple[ModelRecord, Weights]] = {}
    champions = [t for t in [*loaded, *by_recipe] if models[t].status == "active"]
    shadow_by_recipe: dict[str, ModelRecord] = {}
    for t, rec in shadow_models(engine, champions).items():
        if rec.recipe != LSTM:
            shadow_by_recipe[t] = rec
            continue
        try:
            shadow_loaded[t] = (rec, load_verified_model(rec, t))
        except Exception as exc:  # noqa: BLE001 - a broken shadow must not stop the published row
            result.shadow_skipped[t] = recipe_serving.cannot_run(rec, exc)
    windows = {t: m.cfg.window for t, (_, m) in loaded.items()}
    shadow_windows = {t: m.cfg.window for t, (_, m) in shadow_loaded.items()}
    features = {t: m.cfg.features for t, (_, m) in loaded.items()}
    shadow_features = {t: m.cfg.features for t, (_, m) in shadow_loaded.items()}
    cfgs = [m.cfg for _, m in [*loaded.values(), *shadow_loaded.values()]]
    need = max((c.window + warmup_rows(c.features) for c in cfgs), default=0) + RSI_SETTLE_ROWS
    # A recipe's row reads its inputs' lookback (and the previous close); its context (the market) too.
    recipe_need, context = recipe_serving.reads([*by_recipe.values(), *shadow_by_recipe.values()])
    need = max(need, recipe_need + 1) if recipe_need else need
    read = [*loaded, *by_recipe]
    read += [t for t in context if t not in read]
    arrays = load_price_arrays(engine, read, start_for(run_date, need), run_date) if read else {}
    t1 = time.perf_counter()
    result.phases["load"] = round(t1 - t0, 4)

    # features
    built, skipped, why = _model_windows(engine, arrays, windows, features, run_date, need)
    result.skipped.update(skipped)
    result.features_recomputed = why
    inputs = [_Input(t, loaded[t][0], *built[t]) for t in loaded if t in built]
    shadow_windows = {t: w for t, w in shadow_windows.items() if t in built}
    s_built, s_skipped, _ = _model_windows(engine, arrays, shadow_windows, shadow_features, run_date, need)
    result.shadow_skipped.update(s_skipped)
    shadow_inputs = [_Input(t, shadow_loaded[t][0], *s_built[t]) for t in shadow_windows if t in s_built]
    t2 = time.perf_counter()
    result.phases["features"] = round(t2 - t1, 4)

    # forward: one batch per architecture signature
    preds, failed = _forward_grouped(inputs, loaded)
    result.failed.update(failed)
    inputs = [inp for inp in inputs if inp.ticker in preds]
    s_preds, s_failed = _forward_grouped([i for i in shadow_inputs if i.ticker in preds], shadow_loaded)
    result.shadow_skipped.update(s_failed)
    shadow_inputs = [inp for inp in shadow_inputs if inp.ticker in s_preds]
    r_inputs, r_preds, r_skipped, r_failed = _recipe_forecasts(by_recipe, arrays, run_date, engine)
    result.skipped.update(r_skipped)
    result.failed.update(r_failed)
    inputs += r_inputs
    preds.update(r_preds)
    shadow_by_recipe = {t: rec for t, rec in shadow_by_recipe.items() if t in preds}
    r_inputs, r_preds, r_skipped, r_failed = _recipe_forecasts(shadow_by_recipe, arrays, run_date, engine)
    result.shadow_skipped.update({**r_skipped, **r_failed})
    shadow_inputs += r_inputs
    s_preds.update(r_preds)
    result.skipped.update(result.failed)  # every ticker not predicted is skipped; `failed` says which failed
    t3 = time.perf_counter()
    result.phases["forward"] = round(t3 - t2, 4)

    # write: one transaction
    targets = {
        h: pd.Timestamp(d[0]).date()
        for h, d in target_dates(np.array([np.datetime64(run_date, "D")])).items()
    }
    now = dt.datetime.now(dt.UTC)
    rows = []
    # Champions first: within one ticker a shadow row is chained after the published one.
    for inp, p in [(i, preds[i.ticker]) for i in inputs] + [(i, s_preds[i.ticker]) for i in shadow_inputs]:
        direction = str(classify_direction(p[0], inp.close, band))
        rows.append(
            {
                "ticker": inp.ticker,
                "run_date": run_date,
                "run_date_close": inp.close,
                "prev_close": inp.prev_close,
                "model_id": inp.model.id,
                "model_version": inp.model.snapshot_version,
                "model_status": inp.model.status,
                "mode": result.mode,
                **{h.col("pred"): float(p[i]) for i, h in enumerate(HORIZONS)},
                "direction_pred": direction,
                # The model's data cutoff reaches the answer: it may have trained on it.
                "in_sample": targets[DIRECTION.name] <= inp.model.trained_on_date,
                # Fillback and the audit judge this row's actual direction with the same band.
                "neutral_band_pct": band,
                **{h.col("date"): targets[h.name] for h in HORIZONS},
                "run_id": result.run_id,
                "created_at": now,
                # The board's baselines as called this evening (chain version 3 hashes them).
                "baseline_calls": baseline_calls(arrays.get(inp.ticker), run_date),
            }
        )
    pause_point("predict.before_write")
    result.rows_written, result.rows_existing, result.chain_heads = write_rows_anchored(engine, rows)
    pause_point("predict.after_commit")
    result.phases["write"] = round(time.perf_counter() - t3, 4)
    result.shadow = {r["ticker"]: r["model_version"] for r in rows if r["model_status"] == SHADOW}
    rows = [r for r in rows if r["model_status"] != SHADOW]  # below: the published rows only
    result.tickers_predicted = sorted(r["ticker"] for r in rows)
    gated = [r["model_status"] == "active" for r in rows]
    result.cohort = {
        **dict.fromkeys(DIRECTIONS, 0),
        **Counter(r["direction_pred"] for r, g in zip(rows, gated, strict=True) if g),
    }
    result.cohort_ungated = {
        **dict.fromkeys(DIRECTIONS, 0),
        **Counter(r["direction_pred"] for r, g in zip(rows, gated, strict=True) if not g),
    }
    result.used_candidate = sorted(r["ticker"] for r in rows if r["model_status"] == "candidate")
    result.in_sample = sorted(r["ticker"] for r in rows if r["in_sample"])
    result.model_versions = {r["ticker"]: r["model_version"] for r in rows}


def _submitted_champions(
    engine: Engine, result: PredictResult, models: dict[str, ModelRecord], todo: list[str]
) -> list[str]:
    """The tickers still to predict once those whose champion is a submitted model are settled: its row
    for the evening is already recorded (nothing to do), or it is missing and the previous champion LDTM
    can run publishes in its place (`models` is changed to it; the evening says why), or there is none."""
    external = [t for t in todo if models[t].recipe == EXTERNAL]
    if not external:
        return todo
    s = snapshots.c
    with engine.connect() as conn:
        have = {
            r.ticker
            for r in conn.execute(
                select(s.ticker).where(
                    s.run_date == result.run_date, s.model_id.in_([models[t].id for t in external])
                )
            )
        }
        for t in external:
            rec = models[t]
            if t in have:
                result.submitted[t] = rec.snapshot_version
                continue
            previous = [
                m
                for m in (get_model(conn, i) for i in reversed(activation_history(conn, t)) if i != rec.id)
                if m.recipe != EXTERNAL
            ]
            why = f"{rec.ticker}'s champion {rec.snapshot_version} (submitted) has no submission for {result.run_date}"
            if previous:
                models[t] = previous[0]
                result.submission_missing[t] = (
                    f"{why}: the previous champion {previous[0].snapshot_version} publishes"
                )
            else:
                result.skipped[t] = f"{why}, and no earlier champion can publish"
            log.info("predict %s: %s", result.run_date, result.submission_missing.get(t) or result.skipped[t])
    return [t for t in todo if t not in result.submitted and t not in result.skipped]


def _recipe_forecasts(
    recs: dict[str, ModelRecord], arrays: dict, run_date: dt.date, engine: Engine
) -> tuple[list[_Input], dict[str, np.ndarray], dict[str, str]]:
    """Global recipes' forecasts (learning.recipes.serving) as inputs beside the LSTMs' (they read no
    window): (inputs, {ticker: prices}, {ticker: why the data left it out}, {ticker: how its model failed})."""
    if not recs:
        return [], {}, {}, {}
    preds, closes, skipped, failed = recipe_serving.predict(recs, arrays, run_date, engine)
    no_window = np.empty((0, 0), dtype=np.float32)
    inputs = [_Input(t, recs[t], no_window, np.nan, np.nan, *closes[t]) for t in preds]
    return inputs, preds, skipped, failed


def baseline_calls(series: dict | None, run_date: dt.date) -> str:
    """Each board baseline's call on `run_date` from the ticker's closes up to it (scoring.baselines),
    as the JSON the row records; no call (null) where the closes do not reach the run date."""
    which = baselines.board_baselines()
    if series is None or not len(series["close"]):
        return baselines.encode_calls(dict.fromkeys((b.name for b in which), float("nan")))
    close = np.asarray(series["close"], dtype=np.float64)
    at = int(np.searchsorted(series["date"], np.datetime64(run_date, "D"), side="right")) - 1
    if at < 0 or series["date"][at] != np.datetime64(run_date, "D"):
        return baselines.encode_calls(dict.fromkeys((b.name for b in which), float("nan")))
    prev = np.concatenate([[np.nan], close[:-1]])
    calls = baselines.calls(close, prev, np.array([at]), which)
    return baselines.encode_calls({name: float(c[0]) for name, c in calls.items()})


def _model_windows(
    engine: Engine,
    arrays: dict,
    windows: dict[str, int],
    features: dict[str, tuple[str, ...]],
    run_date: dt.date,
    need: int,
) -> tuple[dict, dict[str, str], dict[str, str]]:
    """(normalised windows of each ticker's model's features, {ticker: why skipped}, {ticker: why stored
    features were not used})."""
    if not windows:
        return {}, {}, {}
    built, skipped = build_windows(arrays, windows, run_date, need, features)
    # The stored features (what training saw) replace the recomputed window where they are current.
    stored, why = feature_store.stored_windows(engine, arrays, run_date, windows, features)
    built.update(
        {
            t: (*normalised_window(v, features[t].index("close")), *built[t][3:])
            for t, v in stored.items()
            if t in built
        }
    )
    return built, skipped, {t: reason for t, reason in why.items() if t in built}


def _forward_grouped(
    inputs: list[_Input], loaded: dict[str, tuple[ModelRecord, Weights]]
) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """One batched pass per architecture signature: ({ticker: prices}, {ticker: why it failed})."""
    groups: dict[str, list[_Input]] = defaultdict(list)
    for inp in inputs:
        groups[inp.model.arch_signature].append(inp)
    preds: dict[str, np.ndarray] = {}
    failed: dict[str, str] = {}
    for group in groups.values():
        group_preds, group_failed = _forward_isolated(group, loaded)
        preds.update(group_preds)
        failed.update(group_failed)
    return preds, failed


def _forward_isolated(
    group: list[_Input], loaded: dict[str, tuple[ModelRecord, Weights]]
) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """Prices per ticker for one same-architecture group, and {ticker: reason} for models that cannot run.

    The batched pass runs first; if it fails or yields anything but one finite value per horizon, each
    model is run alone so only the broken ones are skipped (a bad model must not take the evening down).
    """

    def run(members: list[_Input]) -> np.ndarray:
        x = torch.from_numpy(np.stack([g.x for g in members]))
        y = batched_forward([loaded[g.ticker][1] for g in members], x).numpy()
        if y.shape != (len(members), len(HORIZONS)):
            raise ValueError(f"output shape {tuple(y.shape)}, expected ({len(members)}, {len(HORIZONS)})")
        if not np.isfinite(y).all():
            raise ValueError("non-finite prediction")
        lo = np.array([g.close_min for g in members])
        hi = np.array([g.close_max for g in members])
        return denormalise(y, lo, hi)

    try:
        return {g.ticker: row for g, row in zip(group, run(group), strict=True)}, {}
    except Exception:  # noqa: BLE001, S110 - one bad model spoils the batch: run each alone below
        pass
    preds, failed = {}, {}
    for g in group:
        try:
            preds[g.ticker] = run([g])[0]
        except Exception as exc:  # noqa: BLE001 - reported per model in the summary and run_log
            failed[g.ticker] = recipe_serving.cannot_run(g.model, exc)
    return preds, failed


def latest_rows(engine: Engine, run_date: dt.date) -> pd.DataFrame:
    """The snapshot rows of one run date, with the model's registry status, for display."""
    stmt = (
        select(snapshots, model_registry.c.status.label("registry_status"))
        .join(model_registry, model_registry.c.id == snapshots.c.model_id)
        .where(and_(snapshots.c.run_date == run_date))
        .order_by(snapshots.c.ticker)
    )
    with engine.connect() as conn:
        return pd.DataFrame(conn.execute(stmt).mappings().all())
