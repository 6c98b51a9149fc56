"""A market with recorded predictions for the signal-performance tests and benchmark.

Prices come from the synthetic market; each (ticker, evening) gets one snapshot row whose predicted
returns are `skill` x the realised return of the horizon plus noise (skill 0: no skill), written with the
actuals NULL and filled by the project's own fillback, so the realised returns are fillback's."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pandas as pd
from sqlalchemy import insert

from ldtm_core.accountability.ledger.fillback import fillback
from ldtm_core.data.ingest import ingest_frame
from ldtm_core.data.synthetic_market import generate
from ldtm_core.horizons import HORIZONS
from ldtm_core.schema import model_registry, snapshots

BAND = 0.0025  # the neutral band: 0.25 %


def register(engine, ticker: str, status: str = "active", config: str = '{"hidden": 8}') -> int:
    now = dt.datetime.now(dt.UTC)
    with engine.begin() as conn:
        return conn.execute(
            insert(model_registry).values(
                ticker=ticker,
                status=status,
                profile="demo",
                arch_signature="sig",
                config_json=config,
                trained_on_date=dt.date(2000, 1, 3),
                checkpoint_path=f"/x/{ticker}.pt",
                checkpoint_sha256="0" * 64,
                version="v1.2000-01-03" if status == "active" else None,
                created_at=now,
                updated_at=now,
            )  # fmt: skip
        ).inserted_primary_key[0]


def direction(ret: np.ndarray) -> np.ndarray:
    return np.where(ret > BAND, "bullish", np.where(ret < -BAND, "bearish", "neutral"))


def rows_for(
    prices: pd.DataFrame,
    model_ids: dict[str, int],
    *,
    skill: float = 0.0,
    noise: float = 0.01,
    seed: int = 0,
    evenings: int | None = None,
    status: str = "active",
    in_sample: bool = False,
    version: str = "v1.2000-01-03",
    mode: str = "replay",
) -> list[dict]:
    """Snapshot rows (actuals NULL) for every ticker and evening that has its one-month target."""
    rng = np.random.default_rng(seed)
    now = dt.datetime.now(dt.UTC)
    out = []
    for ticker, g in prices.groupby("ticker", sort=True):
        dates = list(pd.to_datetime(g["date"]).dt.date)
        close = [float(c) for c in g["close"]]  # plain floats: psycopg2 cannot adapt numpy scalars
        last = len(dates) - 1 - max(h.sessions or 5 for h in HORIZONS)
        idx = range(max(0, last - evenings) if evenings else 0, last)
        for i in idx:
            # The targets on the prices' own sessions (the one-month target 21 sessions on).
            monday = next((j for j in range(i + 1, i + 6) if dates[j].weekday() == 0), i + 5)
            targets = {h.name: i + h.sessions if h.sessions else monday for h in HORIZONS}
            pred = {
                h: close[i] * (1 + skill * (close[j] / close[i] - 1) + noise * float(rng.standard_normal()))
                for h, j in targets.items()
            }
            out.append(
                {
                    "ticker": ticker, "run_date": dates[i], "run_date_close": close[i],
                    "prev_close": close[i - 1] if i else None, "model_id": model_ids[ticker],
                    "model_version": version, "model_status": status, "mode": mode, "in_sample": in_sample,
                    **{f"{h}_pred": p for h, p in pred.items()},
                    "direction_pred": str(direction(np.array([pred["next_day"] / close[i] - 1]))[0]),
                    "neutral_band_pct": 0.25,
                    **{f"{h}_date": dates[j] for h, j in targets.items()}, "run_id": "t", "created_at": now,
                    "prev_hash": f"{ticker}{dates[i]}{version}", "row_hash": "h", "chain_version": 2,
                }
            )  # fmt: skip
    return out


def seed_market(
    engine,
    tickers: list[str],
    start: str = "2023-01-03",
    end: str = "2023-12-29",
    *,
    skill: float = 0.0,
    noise: float = 0.01,
    seed: int = 0,
    splits=None,
    fill: bool = True,
) -> pd.DataFrame:
    """Prices, an active model per ticker, one row per evening; filled back. Returns the prices."""
    df = generate(tickers, start, end, seed=seed, splits=splits)
    ingest_frame(engine, df, "synthetic")
    ids = {t: register(engine, t) for t in tickers}
    write(engine, rows_for(df, ids, skill=skill, noise=noise, seed=seed))
    if fill:
        fillback(engine)
    return df


def write(engine, rows: list[dict], chunk: int = 5000) -> None:
    with engine.begin() as conn:
        for i in range(0, len(rows), chunk):
            conn.execute(insert(snapshots), rows[i : i + chunk])


def frame_rows(pred: np.ndarray, real: np.ndarray):
    """evenings x tickers arrays -> the Rows the report reads (every horizon the same returns, business
    days from 2021-01-04), with the same-close held returns (the rows' own next-day returns)."""
    from ldtm_core.accountability.signals.execution import with_held
    from ldtm_core.accountability.signals.rows import Rows, with_returns
    from ldtm_core.horizons import NAMES

    e, n = pred.shape
    days = [d.date() for d in pd.bdate_range("2021-01-04", periods=e)]
    ticker = np.tile([f"T{i:03d}" for i in range(n)], e)
    p, a = pred.ravel(), real.ravel()
    frame = pd.DataFrame(
        {"ticker": ticker, "run_date": np.repeat(days, n), "in_sample": False, "model_status": "active",
         "run_date_close": 100.0,
         "direction_pred": np.where(p > 0.0025, "bullish", np.where(p < -0.0025, "bearish", "neutral"))}
    )  # fmt: skip
    for name in NAMES:
        frame[f"{name}_date"], frame[f"{name}_pred"], frame[f"{name}_actual"] = (
            frame["run_date"], 100 * (1 + p), 100 * (1 + a),
        )  # fmt: skip
    rows = with_held(with_returns(frame), "same_close")
    return Rows(rows, sorted(set(ticker)), 0, 0, 0, pd.DataFrame())
