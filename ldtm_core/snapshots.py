"""Inference and snapshots (SPEC §7): one recorded, hash-chained prediction row per ticker per run.

`predict` reads every window with one prices query, loads each checkpoint once (verified against the
registry), runs one batched forward pass per architecture, and writes all rows in one transaction.
Rows already present for (ticker, run_date, model_version) are left alone: a rerun is a no-op.
"""

from __future__ import annotations

import datetime as dt
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from sqlalchemy import Connection, Engine, and_, func, select, tuple_
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import IntegrityError

from . import feature_store, runlog
from .audit import row_hash
from .calendar import is_session, session_array, target_dates
from .checkpoints import load_checkpoint, sha256_file
from .config import Settings
from .db import is_postgres, run_in_transaction, write_lock
from .errors import CheckpointError, InputError, NotFoundError
from .faults import pause_point
from .features import CLOSE_INDEX, WARMUP_ROWS, compute_features, feature_array
from .model import LDTM
from .prices import latest_price_date
from .registry import ModelRecord, serving_models
from .samples import HORIZONS, denormalise, normalise_windows
from .schema import model_registry, prices, snapshots
from .universe import validate_ticker

DIRECTIONS = ("bullish", "neutral", "bearish")
CHAIN_LOCK = "ldtm:snapshots:chain"


def classify_direction(value, close, band_pct: float) -> np.ndarray:
    """bullish / neutral / bearish for `value` vs `close`; the band (in %) is inclusive of neutral."""
    pct = (
        (np.asarray(value, dtype=np.float64) - np.asarray(close, dtype=np.float64))
        / np.asarray(close)
        * 100.0
    )
    return np.where(pct > band_pct, "bullish", np.where(pct < -band_pct, "bearish", "neutral"))


@dataclass
class PredictResult:
    run_id: str
    run_date: dt.date
    mode: str
    rows_written: int = 0
    rows_existing: int = 0
    tickers_predicted: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    cohort: dict[str, int] = field(default_factory=lambda: dict.fromkeys(DIRECTIONS, 0))
    phases: dict[str, float] = field(default_factory=dict)
    used_candidate: list[str] = field(default_factory=list)
    features_recomputed: dict[str, str] = field(default_factory=dict)  # ticker -> why stored were not used

    def summary(self) -> dict:
        return {
            "run_date": self.run_date.isoformat(),
            "mode": self.mode,
            "rows_written": self.rows_written,
            "rows_existing": self.rows_existing,
            "predicted": len(self.tickers_predicted),
            "cohort": self.cohort,
            "skipped": self.skipped,
            "used_candidate": self.used_candidate,
            "features_recomputed": self.features_recomputed,
        }


# --- batched forward ----------------------------------------------------------------------------


@torch.no_grad()
def batched_forward(models: Sequence[LDTM], x: torch.Tensor) -> torch.Tensor:
    """Run M same-architecture models, model i on x[i] ([M, W, F] -> [M, horizons]), in one pass.

    The weights are stacked and the LSTM recurrence runs as batched matrix products, so 103 tickers cost
    one pass of W steps instead of 103 module calls. Eval-mode semantics (no dropout); exact up to
    float rounding, checked against the modules in the tests.
    """
    m = len(models)
    if m == 0:
        return torch.empty(0, 0)
    cfg = models[0].cfg
    h_size = cfg.hidden_size
    inp = x.to(torch.float32)  # [M, W, I]
    for layer in range(cfg.num_layers):
        w_ih = torch.stack([getattr(md.lstm, f"weight_ih_l{layer}") for md in models])  # [M, 4H, I]
        w_hh = torch.stack([getattr(md.lstm, f"weight_hh_l{layer}") for md in models])  # [M, 4H, H]
        bias = torch.stack(
            [getattr(md.lstm, f"bias_ih_l{layer}") + getattr(md.lstm, f"bias_hh_l{layer}") for md in models]
        )  # [M, 4H]
        gx = torch.bmm(inp, w_ih.transpose(1, 2)) + bias[:, None, :]  # [M, W, 4H]
        h = torch.zeros(m, h_size)
        c = torch.zeros(m, h_size)
        w_hh_t = w_hh.transpose(1, 2)
        outs = []
        for t in range(inp.shape[1]):
            gates = gx[:, t, :] + torch.bmm(h[:, None, :], w_hh_t)[:, 0, :]
            i, f, g, o = gates.chunk(4, dim=1)
            c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
            h = torch.sigmoid(o) * torch.tanh(c)
            outs.append(h)
        inp = torch.stack(outs, dim=1)
    last = inp[:, -1, :]  # [M, H]
    preds = []
    for k in range(len(cfg.horizons)):
        l1 = [md.heads[k].net[0] for md in models]
        l2 = [md.heads[k].net[3] for md in models]
        z = torch.bmm(last[:, None, :], torch.stack([lin.weight for lin in l1]).transpose(1, 2))[:, 0, :]
        z = torch.relu(z + torch.stack([lin.bias for lin in l1]))
        out = torch.bmm(z[:, None, :], torch.stack([lin.weight for lin in l2]).transpose(1, 2))[:, 0, :]
        preds.append(out + torch.stack([lin.bias for lin in l2]))
    return torch.cat(preds, dim=1)


# --- inputs ---------------------------------------------------------------------------------------


# RSI uses Wilder smoothing seeded at the start of the series, so a window's RSI depends (weakly) on
# how far back the series starts. Training sees the whole history; inference loads this many extra
# sessions so the seed's weight, (13/14)**250 ~ 1e-8, is far below float32 resolution.
RSI_SETTLE_ROWS = 250
PRICE_FIELDS = ("open", "high", "low", "close", "volume")


def _start_for(run_date: dt.date, rows_needed: int) -> dt.date:
    """A date far enough back that `rows_needed` sessions up to run_date are included (plus slack)."""
    s = session_array()
    i = int(np.searchsorted(s, np.datetime64(run_date, "D"), "right")) - 1
    return pd.Timestamp(s[max(0, i - rows_needed - 10)]).date()


def features_batch(o: np.ndarray, h: np.ndarray, lo: np.ndarray, c: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Features of T aligned, gap-free series at once: [T, L] -> [T, L - WARMUP_ROWS, 11]."""
    return feature_array(o, h, lo, c, v)[:, WARMUP_ROWS:, :]


@dataclass
class _Input:
    ticker: str
    model: ModelRecord
    x: np.ndarray  # [W, F] normalised
    close_min: float
    close_max: float
    close: float
    prev_close: float | None


def _normalised(values: np.ndarray) -> tuple[np.ndarray, float, float]:
    x, lo, hi = normalise_windows(values[None, :, :])
    return x[0], float(lo[0, CLOSE_INDEX]), float(hi[0, CLOSE_INDEX])


def _short_reason(ticker: str, n_rows: int, run_date: dt.date, window: int) -> str:
    return (
        f"{ticker} has {n_rows} price rows up to {run_date}; the window needs {window + WARMUP_ROWS} "
        f"({window} feature rows after {WARMUP_ROWS} warm-up rows)"
    )


def _window(ticker: str, frame: pd.DataFrame, run_date: dt.date, window: int) -> tuple | str:
    """(x, close_min, close_max, close, prev_close) for the window ending at run_date, or a skip reason.

    The per-ticker path (pandas compute_features): used for short histories and rows with gaps.
    """
    if frame.empty or frame["date"].iloc[-1] != run_date:
        return f"no price for {ticker} on {run_date}"
    feats = compute_features(frame)
    if len(feats) < window:
        return _short_reason(ticker, len(frame), run_date, window)
    x, lo, hi = _normalised(feats.to_numpy(dtype=np.float64)[-window:])
    closes = frame["close"].to_numpy(dtype=np.float64)
    prev = float(closes[-2]) if len(closes) >= 2 else None
    return x, lo, hi, float(closes[-1]), prev


def _load_price_arrays(engine: Engine, tickers: list[str], start: dt.date, end: dt.date) -> dict[str, dict]:
    """One query for every ticker; {ticker: {'date': datetime64[D] array, 'open': ..., ...}} without pandas."""
    cols = [prices.c.ticker, prices.c.date, *(prices.c[f] for f in PRICE_FIELDS)]
    stmt = (
        select(*cols)
        .where(prices.c.ticker.in_(tickers), prices.c.date >= start, prices.c.date <= end)
        .order_by(prices.c.ticker, prices.c.date)
    )
    with engine.connect() as conn:
        rows = conn.execute(stmt).all()
    if not rows:
        return {}
    cols_t = list(zip(*rows, strict=True))
    names = np.array(cols_t[0], dtype=object)
    dates = np.array(cols_t[1], dtype="datetime64[D]")
    values = {f: np.array(cols_t[i + 2], dtype=np.float64) for i, f in enumerate(PRICE_FIELDS)}
    out = {}
    bounds = np.flatnonzero(names[1:] != names[:-1]) + 1
    for lo, hi in zip(np.r_[0, bounds], np.r_[bounds, len(names)], strict=True):
        out[names[lo]] = {"date": dates[lo:hi], **{f: v[lo:hi] for f, v in values.items()}}
    return out


def _windows(
    arrays: dict[str, dict], wanted: dict[str, int], run_date: dt.date, need_rows: int
) -> tuple[dict[str, tuple], dict[str, str]]:
    """Windows for {ticker: window}: tickers with `need_rows` gap-free rows go through features_batch
    together; the rest through the per-ticker path. Returns ({ticker: window tuple}, {ticker: reason})."""
    day = np.datetime64(run_date, "D")
    out, skipped, batch = {}, {}, []
    for t, window in wanted.items():
        a = arrays.get(t)
        if a is None or a["date"][-1] != day:
            skipped[t] = f"no price for {t} on {run_date}"
        elif len(a["date"]) >= need_rows:
            batch.append(t)
        else:
            frame = pd.DataFrame({"date": pd.to_datetime(a["date"]).date, **{f: a[f] for f in PRICE_FIELDS}})
            res = _window(t, frame, run_date, window)
            (skipped if isinstance(res, str) else out)[t] = res
    if batch:
        stacked = {f: np.stack([arrays[t][f][-need_rows:] for t in batch]) for f in PRICE_FIELDS}
        feats = features_batch(*(stacked[f] for f in PRICE_FIELDS))
        for i, t in enumerate(batch):
            w = wanted[t]
            values = feats[i, -w:]
            if not np.isfinite(values).all():  # a bad price: let the per-ticker path judge it
                frame = pd.DataFrame(
                    {
                        "date": pd.to_datetime(arrays[t]["date"]).date,
                        **{f: arrays[t][f] for f in PRICE_FIELDS},
                    }
                )
                res = _window(t, frame, run_date, w)
                (skipped if isinstance(res, str) else out)[t] = res
                continue
            x, lo, hi = _normalised(values)
            out[t] = (x, lo, hi, float(stacked["close"][i, -1]), float(stacked["close"][i, -2]))
    return out, skipped


# --- writing --------------------------------------------------------------------------------------


class _ChainConflict(Exception):
    """Another writer extended a ticker's chain between our read and our insert: redo the transaction."""


def _write(conn: Connection, rows: list[dict]) -> tuple[int, int]:
    """Insert rows (chained) in the caller's transaction; returns (written, already existing)."""
    write_lock(conn, CHAIN_LOCK)
    if not rows:
        return 0, 0
    run_date = rows[0]["run_date"]
    keys = [(r["ticker"], r["model_version"]) for r in rows]
    existing = {
        (t, v)
        for t, v in conn.execute(
            select(snapshots.c.ticker, snapshots.c.model_version).where(
                snapshots.c.run_date == run_date,
                tuple_(snapshots.c.ticker, snapshots.c.model_version).in_(keys),
            )
        )
    }
    todo = [r for r in rows if (r["ticker"], r["model_version"]) not in existing]
    if not todo:
        return 0, len(existing)
    tickers = sorted({r["ticker"] for r in todo})
    latest_ids = (
        select(func.max(snapshots.c.id)).where(snapshots.c.ticker.in_(tickers)).group_by(snapshots.c.ticker)
    ).scalar_subquery()
    heads = dict(
        conn.execute(
            select(snapshots.c.ticker, snapshots.c.row_hash).where(snapshots.c.id.in_(latest_ids))
        ).all()
    )
    for r in todo:
        r["prev_hash"] = heads.get(r["ticker"], "")
        r["row_hash"] = row_hash(r["prev_hash"], r)
    insert_fn = postgresql.insert if is_postgres(conn) else sqlite.insert
    # Conflict target = the natural key only: a chain (ticker, prev_hash) conflict must raise, not vanish.
    stmt = insert_fn(snapshots).on_conflict_do_nothing(index_elements=["ticker", "run_date", "model_version"])
    try:
        with conn.begin_nested():
            conn.execute(stmt, todo)
    except IntegrityError as exc:
        raise _ChainConflict(str(exc.orig)) from exc
    pause_point("predict.before_commit")
    # Count what this run really inserted (executemany rowcounts are not reliable across drivers).
    run_ids = sorted({r["run_id"] for r in todo})
    written = conn.execute(
        select(func.count())
        .select_from(snapshots)
        .where(
            snapshots.c.run_date == run_date,
            snapshots.c.run_id.in_(run_ids),
            snapshots.c.ticker.in_(tickers),
        )
    ).scalar_one()
    return written, len(rows) - written


def write_rows(engine: Engine, rows: list[dict], attempts: int = 3) -> tuple[int, int]:
    """Write snapshot rows in one transaction, serialised against other writers; retry a chain conflict."""
    for attempt in range(attempts):
        fresh = [dict(r) for r in rows]
        try:
            return run_in_transaction(engine, lambda conn, fresh=fresh: _write(conn, fresh))
        except _ChainConflict:
            if attempt == attempts - 1:
                raise
            time.sleep(0.05 * (attempt + 1))
    raise AssertionError("unreachable")


# --- models ---------------------------------------------------------------------------------------

# Verified models kept across runs in one process (a Dagster code server, a benchmark): (path, sha256)
# -> module. The file on disk is re-hashed against the registry on every run, so a replaced or corrupted
# checkpoint is still refused; only the unpickling and module construction are saved.
_MODEL_CACHE: dict[tuple[str, str], LDTM] = {}
_MODEL_CACHE_MAX = 2048


def clear_model_cache() -> None:
    _MODEL_CACHE.clear()


def _load_model(rec: ModelRecord, ticker: str) -> LDTM:
    key = (rec.load_path, rec.checkpoint_sha256)
    model = _MODEL_CACHE.get(key)
    if model is not None:
        path = Path(rec.load_path)
        if not path.is_file():
            raise CheckpointError(f"checkpoint {path} (ticker {ticker}) is missing")
        digest = sha256_file(path)
        if digest != rec.checkpoint_sha256:
            raise CheckpointError(
                f"checkpoint {path} (ticker {ticker}) does not match the registry: "
                f"sha256 {digest[:12]}… != {rec.checkpoint_sha256[:12]}…"
            )
        return model
    ckpt = load_checkpoint(rec.load_path, expected_sha256=rec.checkpoint_sha256, ticker=ticker)
    if ckpt.signature != rec.arch_signature:
        raise CheckpointError(
            f"checkpoint {rec.load_path} ({ticker}) has another architecture than its registry row"
        )
    if len(_MODEL_CACHE) >= _MODEL_CACHE_MAX:
        _MODEL_CACHE.clear()
    _MODEL_CACHE[key] = ckpt.model
    return ckpt.model


# --- predict --------------------------------------------------------------------------------------


def predict(
    engine: Engine,
    settings: Settings,
    run_date: dt.date | None = None,
    tickers: Sequence[str] | None = None,
    mode: str | None = None,
    neutral_band_pct: float | None = None,
) -> PredictResult:
    """Predict the three horizons for every ticker with a model and record them (see module doc)."""
    if mode is not None and mode not in ("live", "replay"):
        raise InputError(f"mode must be 'live' or 'replay', not {mode!r}")
    band = settings.neutral_band_pct if neutral_band_pct is None else float(neutral_band_pct)
    if band < 0:
        raise InputError(f"neutral band must be >= 0 %, not {band}")
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
        raise InputError(
            f"run date {run_date} is outside the price data: no ticker with a model has a close on it"
            + (f" (latest close {latest})" if latest else "")
        )
    if mode is None:
        mode = "replay" if latest is not None and run_date < latest else "live"
    result = PredictResult(run_id=str(uuid.uuid4()), run_date=run_date, mode=mode)
    runlog.start(engine, "predict", run_date, wanted, run_id=result.run_id)
    try:
        _predict(engine, result, models, wanted, band, t0)
    except BaseException as exc:
        runlog.finish(engine, result.run_id, "failed", phases=result.phases, message=str(exc)[:2000])
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
    for t in wanted:
        if t not in models:
            result.skipped[t] = f"{t} has no active or candidate model"
    todo = [t for t in wanted if t in models]

    # load: one prices query, each checkpoint once
    loaded: dict[str, tuple[ModelRecord, LDTM]] = {}
    for t in todo:
        try:
            loaded[t] = (models[t], _load_model(models[t], t))
        except CheckpointError as exc:
            result.skipped[t] = str(exc)
        except Exception as exc:  # noqa: BLE001 - one model that cannot load must not stop the others
            result.skipped[t] = _cannot_run(models[t], t, exc)
    windows = {t: m.cfg.window for t, (_, m) in loaded.items()}
    need = max(windows.values(), default=0) + WARMUP_ROWS + RSI_SETTLE_ROWS
    arrays = _load_price_arrays(engine, list(loaded), _start_for(run_date, need), run_date) if loaded else {}
    t1 = time.perf_counter()
    result.phases["load"] = round(t1 - t0, 4)

    # features
    built, skipped = _windows(arrays, windows, run_date, need)
    result.skipped.update(skipped)
    # The stored features (what training saw) replace the recomputed window where they are current.
    stored, why = feature_store.stored_windows(engine, arrays, run_date, windows)
    built.update({t: (*_normalised(v), *built[t][3:]) for t, v in stored.items() if t in built})
    result.features_recomputed = {t: reason for t, reason in why.items() if t in built}
    inputs = [_Input(t, loaded[t][0], *built[t]) for t in loaded if t in built]
    t2 = time.perf_counter()
    result.phases["features"] = round(t2 - t1, 4)

    # forward: one batch per architecture signature
    groups: dict[str, list[_Input]] = defaultdict(list)
    for inp in inputs:
        groups[inp.model.arch_signature].append(inp)
    preds: dict[str, np.ndarray] = {}
    for group in groups.values():
        group_preds, failed = _forward_isolated(group, loaded)
        preds.update(group_preds)
        result.skipped.update(failed)
    inputs = [inp for inp in inputs if inp.ticker in preds]
    t3 = time.perf_counter()
    result.phases["forward"] = round(t3 - t2, 4)

    # write: one transaction
    nd, nm, om = (pd.Timestamp(d[0]).date() for d in target_dates(np.array([np.datetime64(run_date, "D")])))
    now = dt.datetime.now(dt.UTC)
    rows = []
    for inp in inputs:
        p = preds[inp.ticker]
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
                "next_day_pred": float(p[0]),
                "next_monday_pred": float(p[1]),
                "one_month_pred": float(p[2]),
                "direction_pred": direction,
                "next_day_date": nd,
                "next_monday_date": nm,
                "one_month_date": om,
                "run_id": result.run_id,
                "created_at": now,
            }
        )
    pause_point("predict.before_write")
    result.rows_written, result.rows_existing = write_rows(engine, rows)
    pause_point("predict.after_commit")
    result.phases["write"] = round(time.perf_counter() - t3, 4)
    result.tickers_predicted = sorted(r["ticker"] for r in rows)
    result.cohort = {**dict.fromkeys(DIRECTIONS, 0), **Counter(r["direction_pred"] for r in rows)}
    result.used_candidate = sorted(r["ticker"] for r in rows if r["model_status"] == "candidate")


def _cannot_run(rec: ModelRecord, ticker: str, exc: BaseException) -> str:
    detail = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"model {rec.id} ({ticker}) cannot run: {type(exc).__name__}" + (f": {detail}" if detail else "")


def _forward_isolated(
    group: list[_Input], loaded: dict[str, tuple[ModelRecord, LDTM]]
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
            failed[g.ticker] = _cannot_run(g.model, g.ticker, exc)
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
