"""Fillback (SPEC §8): add the actual closes to snapshot rows once their target dates have prices.

One query joins the pending rows to the three target-date closes. Each horizon is filled on its own
(a next-day actual arrives weeks before the one-month one) by a batched UPDATE that only touches
columns still NULL, so a rerun or a concurrent run never fills anything twice. Prediction columns are
never written, so the audit chain stays valid.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

import numpy as np
from sqlalchemy import Boolean, Engine, Float, Integer, String, and_, bindparam, column, or_, select, update
from sqlalchemy import values as sa_values
from sqlalchemy.orm import aliased

from .config import Settings
from .db import chunked, is_postgres, run_in_transaction
from .schema import prices, snapshots
from .snapshots import classify_direction

HORIZONS = ("next_day", "next_monday", "one_month")


@dataclass
class PendingFill:
    id: int
    ticker: str
    run_date: dt.date
    horizon: str
    target_date: dt.date
    actual: float


@dataclass
class FillbackResult:
    dry_run: bool
    pending: list[PendingFill] = field(default_factory=list)
    filled: dict[str, int] = field(default_factory=lambda: dict.fromkeys(HORIZONS, 0))
    rows_pending: int = 0  # snapshot rows with at least one fillable horizon

    @property
    def total_filled(self) -> int:
        return sum(self.filled.values())


def _pending(conn) -> list:
    """Rows with a NULL actual whose target date has a price: one query, three outer joins to prices."""
    px = {h: aliased(prices, name=f"p_{h}") for h in HORIZONS}
    s = snapshots.c
    stmt = select(
        s.id,
        s.ticker,
        s.run_date,
        s.run_date_close,
        *(s[f"{h}_pred"] for h in HORIZONS),
        *(s[f"{h}_date"] for h in HORIZONS),
        *(s[f"{h}_actual"].is_(None).label(f"{h}_open") for h in HORIZONS),
        *(px[h].c.close.label(f"{h}_close") for h in HORIZONS),
    )
    frm = snapshots
    for h in HORIZONS:
        frm = frm.outerjoin(px[h], and_(px[h].c.ticker == s.ticker, px[h].c.date == s[f"{h}_date"]))
    fillable = [and_(s[f"{h}_actual"].is_(None), px[h].c.close.is_not(None)) for h in HORIZONS]
    return conn.execute(stmt.select_from(frm).where(or_(*fillable)).order_by(s.id)).all()


def fillback(engine: Engine, dry_run: bool = False, neutral_band_pct: float | None = None) -> FillbackResult:
    # The same band as predict (LDTM_NEUTRAL_BAND_PCT, default 0.25 %) unless given.
    band = Settings.from_env().neutral_band_pct if neutral_band_pct is None else float(neutral_band_pct)
    result = FillbackResult(dry_run=dry_run)
    with engine.connect() as conn:
        rows = _pending(conn)
    result.rows_pending = len(rows)
    if not rows:
        return result
    cols = {name: i for i, name in enumerate(rows[0]._fields)}
    arr = list(zip(*rows, strict=True))
    ids = np.array(arr[cols["id"]], dtype=np.int64)
    close = np.array(arr[cols["run_date_close"]], dtype=np.float64)

    updates: dict[str, list[dict]] = {}
    for h in HORIZONS:
        open_ = np.array(arr[cols[f"{h}_open"]], dtype=bool)
        actual = np.array([np.nan if v is None else v for v in arr[cols[f"{h}_close"]]], dtype=np.float64)
        sel = open_ & ~np.isnan(actual)
        if dry_run:
            for i in np.flatnonzero(sel):
                result.pending.append(
                    PendingFill(
                        int(ids[i]),
                        rows[i].ticker,
                        rows[i].run_date,
                        h,
                        getattr(rows[i], f"{h}_date"),
                        float(actual[i]),
                    )
                )
            continue
        pred = np.array(arr[cols[f"{h}_pred"]], dtype=np.float64)[sel]
        act, c = actual[sel], close[sel]
        err = (pred - act) / act * 100.0
        batch = {"b_id": ids[sel].tolist(), "b_actual": act.tolist(), "b_err": err.tolist()}
        if h == "next_day":
            batch["b_dir"] = classify_direction(act, c, band).tolist()
            batch["b_ok"] = (np.sign(pred - c) == np.sign(act - c)).tolist()
        keys = list(batch)
        updates[h] = [dict(zip(keys, vals, strict=True)) for vals in zip(*batch.values(), strict=True)]
    if dry_run:
        result.pending.sort(key=lambda p: (p.ticker, p.run_date, HORIZONS.index(p.horizon)))
        return result

    now = dt.datetime.now(dt.UTC)

    def work(conn) -> dict[str, int]:
        return {h: _apply(conn, h, updates.get(h, []), now) for h in HORIZONS}

    result.filled = run_in_transaction(engine, work)
    return result


def _set_clause(h: str, src) -> dict:
    out = {f"{h}_actual": src["b_actual"], f"{h}_pct_error": src["b_err"]}
    if h == "next_day":
        out["next_day_direction_actual"] = src["b_dir"]
        out["next_day_direction_correct"] = src["b_ok"]
    return out


def _apply(conn, h: str, rows: list[dict], now: dt.datetime) -> int:
    """Batched UPDATE of one horizon, only where its actual is still NULL; returns rows filled."""
    if not rows:
        return 0
    s = snapshots.c
    filled = 0
    if is_postgres(conn):
        # UPDATE ... FROM (VALUES ...): one statement per chunk instead of a round trip per row.
        types = {"b_id": Integer, "b_actual": Float, "b_err": Float, "b_dir": String, "b_ok": Boolean}
        keys = list(rows[0])
        for part in chunked(rows, 5000):
            v = sa_values(*(column(k, types[k]) for k in keys), name="v").data(
                [tuple(r[k] for k in keys) for r in part]
            )
            stmt = (
                update(snapshots)
                .where(s.id == v.c.b_id, s[f"{h}_actual"].is_(None))
                .values(**_set_clause(h, v.c), filled_at=now)
            )
            filled += conn.execute(stmt).rowcount
        return filled
    params = {k: bindparam(k) for k in rows[0]}
    stmt = (
        update(snapshots)
        .where(s.id == bindparam("b_id"), s[f"{h}_actual"].is_(None))
        .values(**_set_clause(h, params), filled_at=now)
    )
    return conn.execute(stmt, rows).rowcount
