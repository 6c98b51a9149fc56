"""Re-fill: a filled actual that today's prices contradict for a recorded reason is re-filled, logged, audited.

An actual is stale when it differs from what the fillback would write today (the target's stored close on
the run date's basis). Two ordinary events make one, and each leaves a record to check it against:
- a revision: the target's bar was re-written by an ingest after the actual was filled
  (prices.ingested_at > that horizon's own fill time, `snapshots.<horizon>_filled_at`: the row's
  `filled_at` moves with every later horizon's fill, which would hide the revision). Inside the overlap window the nightly fetch does this by
  design; further back only a forced re-ingest does;
- a late corporate action between run date and target: recorded after the fill, or the stored actual is
  exactly the raw close (the action's factor was not applied).
Anything else (an actual, an error or a price edited by hand) is unexplained: the audit reports it and
the nightly's blocking check stops, as for any tampering.

`refill` rewrites the explained stale actuals (and their pct errors and direction flags), and writes one
`fill_revisions` row per value with the old and the new actual and the reason, in the same transaction,
under the fillback lock. `automatic=True` (the nightly's fillbacks asset, before filling) takes revisions
of bars inside the overlap window and late corporate actions; `ldtm fillback --refill` takes every
explained one (e.g. after a forced re-ingest of older history); its dry run lists them.
"""

from __future__ import annotations

import datetime as dt
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import pandas as pd
from sqlalchemy import Connection, Engine, and_, exists, func, insert, or_, select, update

from ldtm_core.accountability.ledger.fillback import (
    LEGACY_NEUTRAL_BAND_PCT,
    direction_hit,
    pct_error,
    row_band,
)
from ldtm_core.accountability.ledger.target_prices import target_prices
from ldtm_core.data.corporate_actions import basis_factor
from ldtm_core.data.price_fetch import DEFAULT_OVERLAP_SESSIONS, sessions_before
from ldtm_core.db import run_in_transaction, write_lock
from ldtm_core.horizons import DIRECTION
from ldtm_core.horizons import NAMES as HORIZONS
from ldtm_core.schema import corporate_actions, fill_revisions, prices, snapshots

log = logging.getLogger("ldtm.refill")

FILL_LOCK = "ldtm:fillback"  # the fillback's lock: a re-fill and a fill never interleave
REL_TOL = 1e-9
# Bars this many sessions before a ticker's newest stored bar are inside the nightly's revision window
# (the fetch re-asks `overlap` sessions and the evening adds one).
WINDOW_SESSIONS = DEFAULT_OVERLAP_SESSIONS + 1


@dataclass(frozen=True)
class StaleActual:
    id: int
    ticker: str
    run_date: dt.date
    model_version: str
    horizon: str
    target_date: dt.date
    old_actual: float
    old_pct_error: float | None
    new_actual: float
    reason: str | None  # None: unexplained (an edit): not re-filled, the audit reports it
    automatic: bool = False  # the nightly re-fills it without being asked

    def describe(self) -> str:
        return (
            f"{self.ticker} {self.run_date} {self.horizon} (target {self.target_date}): "
            f"{self.old_actual:g} -> {self.new_actual:g}: {self.reason or 'unexplained'}"
        )


@dataclass
class RefillResult:
    dry_run: bool
    refilled: list[StaleActual] = field(default_factory=list)  # done, or pending on a dry run
    left: list[StaleActual] = field(
        default_factory=list
    )  # explained, not automatic: `ldtm fillback --refill`
    unexplained: list[StaleActual] = field(default_factory=list)


def _utc(value) -> dt.datetime | None:
    if value is None:
        return None
    ts = pd.Timestamp(value)
    return (ts.tz_localize("UTC") if ts.tzinfo is None else ts.tz_convert("UTC")).to_pydatetime()


def _close(a: float, b: float) -> bool:
    return math.isclose(float(a), float(b), rel_tol=REL_TOL, abs_tol=1e-9)


def _actions_with_times(conn: Connection, tickers: Sequence[str] | None) -> dict[str, list]:
    c = corporate_actions.c
    stmt = select(c.ticker, c.ex_date, c.factor, c.kind, c.recorded_at).order_by(c.ticker, c.ex_date)
    if tickers:
        stmt = stmt.where(c.ticker.in_(list(tickers)))
    out: dict[str, list] = {}
    for r in conn.execute(stmt):
        out.setdefault(r.ticker, []).append(r)
    return out


def find_stale(conn: Connection, tickers: Sequence[str] | None = None) -> list[StaleActual]:
    """Every filled actual that differs from today's close on its run date's basis, with its reason.

    Only rows that could be stale are read: a bar ingested after the fill, or a corporate action between
    run date and target; the audit finds the rest (unexplained) from all rows."""
    s, ca = snapshots.c, corporate_actions.c
    frm, px = target_prices("r")
    candidate = [
        and_(
            s[f"{h}_actual"].is_not(None),
            or_(
                px[h].c.ingested_at > func.coalesce(s[f"{h}_filled_at"], s.filled_at),
                exists(
                    select(ca.ticker).where(
                        ca.ticker == s.ticker, ca.ex_date > s.run_date, ca.ex_date <= s[f"{h}_date"]
                    )
                ),
            ),
        )
        for h in HORIZONS
    ]
    stmt = select(
        s.id,
        s.ticker,
        s.run_date,
        s.model_version,
        s.run_date_close,
        s.filled_at,
        *(s[f"{h}_{c}"] for h in HORIZONS for c in ("pred", "date", "actual", "pct_error", "filled_at")),
        *(px[h].c.close.label(f"{h}_close") for h in HORIZONS),
        *(px[h].c.ingested_at.label(f"{h}_ingested_at") for h in HORIZONS),
        *(px[h].c.source.label(f"{h}_source") for h in HORIZONS),
    ).select_from(frm)
    stmt = stmt.where(or_(*candidate))
    if tickers:
        stmt = stmt.where(s.ticker.in_(list(tickers)))
    rows = conn.execute(stmt.order_by(s.id)).all()
    if not rows:
        return []
    names = sorted({r.ticker for r in rows})
    actions = _actions_with_times(conn, names)
    last = dict(
        conn.execute(
            select(prices.c.ticker, func.max(prices.c.date))
            .where(prices.c.ticker.in_(names))
            .group_by(prices.c.ticker)
        ).all()
    )
    window = {t: sessions_before(pd.Timestamp(d).date(), WINDOW_SESSIONS) for t, d in last.items()}
    out: list[StaleActual] = []
    for r in rows:
        run_date = pd.Timestamp(r.run_date).date()
        for h in HORIZONS:
            # This horizon's own fill time (rows filled before 0026 without one: the row's).
            filled_at = _utc(getattr(r, f"{h}_filled_at")) or _utc(r.filled_at)
            actual, close = getattr(r, f"{h}_actual"), getattr(r, f"{h}_close")
            if actual is None or close is None:
                continue  # a vanished close is no recorded reason: the audit reports it
            day = pd.Timestamp(getattr(r, f"{h}_date")).date()
            between = [
                a for a in actions.get(r.ticker, []) if run_date < pd.Timestamp(a.ex_date).date() <= day
            ]
            factor = basis_factor(
                [_Factor(pd.Timestamp(a.ex_date).date(), float(a.factor)) for a in between], run_date, day
            )
            expected = float(close) / factor
            if _close(actual, expected):
                continue
            err = getattr(r, f"{h}_pct_error")
            pred = getattr(r, f"{h}_pred")
            reason, automatic = None, False
            # The stored error must still be the one computed from the stored actual: otherwise it was edited
            # (a row with no predicted price never has one).
            want = pct_error(pred, actual)
            consistent = err is None if want is None else err is not None and _close(err, want)
            late = [a for a in between if filled_at is None or _utc(a.recorded_at) > filled_at]
            ingested = _utc(getattr(r, f"{h}_ingested_at"))
            if not consistent:
                pass
            elif late or (between and _close(actual, float(close))):
                what = ", ".join(
                    f"{a.kind} ex {pd.Timestamp(a.ex_date).date()} factor {a.factor:.6g}" for a in between
                )
                reason = (
                    f"corporate action ({what}) recorded after the fill"
                    if late
                    else f"corporate action ({what}) not applied when filled"
                )
                automatic = True
            elif filled_at is not None and ingested is not None and ingested > filled_at:
                reason = (
                    f"bar of {day} revised by {getattr(r, f'{h}_source')} at {ingested:%Y-%m-%d %H:%M:%S} UTC "
                    "after the fill"
                )
                automatic = r.ticker in window and day >= window[r.ticker]
            out.append(
                StaleActual(
                    int(r.id),
                    r.ticker,
                    run_date,
                    r.model_version,
                    h,
                    day,
                    float(actual),
                    None if err is None else float(err),
                    expected,
                    reason,
                    automatic,
                )
            )
    return out


@dataclass(frozen=True)
class _Factor:
    ex_date: dt.date
    factor: float


def refill(
    engine: Engine,
    *,
    dry_run: bool = False,
    automatic: bool = False,
    tickers: Sequence[str] | None = None,
    neutral_band_pct: float | None = None,
) -> RefillResult:
    """Re-fill the explained stale actuals (all, or only the automatic ones) and record each in
    fill_revisions, in one transaction. Dry run: what would be re-filled, nothing written."""
    # A row is re-judged with the band stored with its prediction; this one only for rows from before it was stored.
    band = LEGACY_NEUTRAL_BAND_PCT if neutral_band_pct is None else float(neutral_band_pct)

    def sort(result: RefillResult, stale: list[StaleActual]) -> RefillResult:
        for st in stale:
            if st.reason is None:
                result.unexplained.append(st)
            elif st.automatic or not automatic:
                result.refilled.append(st)
            else:
                result.left.append(st)
        return result

    if dry_run:
        with engine.connect() as conn:
            return sort(RefillResult(True), find_stale(conn, tickers))

    def work(conn: Connection) -> RefillResult:
        write_lock(conn, FILL_LOCK)
        result = sort(RefillResult(False), find_stale(conn, tickers))
        now = dt.datetime.now(dt.UTC)
        for st in result.refilled:
            _rewrite(conn, st, band, now)
        return result

    result = run_in_transaction(engine, work)
    for st in result.refilled:
        log.warning("re-filled %s", st.describe())
    return result


def _rewrite(conn: Connection, st: StaleActual, band: float, now: dt.datetime) -> None:
    s = snapshots.c
    row = conn.execute(
        select(
            s.run_date_close, s.neutral_band_pct, s.direction_pred, s[f"{st.horizon}_pred"].label("pred")
        ).where(s.id == st.id)
    ).one()
    band = row_band(row.neutral_band_pct, band)
    new_err = pct_error(row.pred, st.new_actual)
    values: dict = {
        f"{st.horizon}_actual": st.new_actual,
        f"{st.horizon}_pct_error": new_err,
        f"{st.horizon}_filled_at": now,
        "filled_at": now,
    }
    if st.horizon == DIRECTION.name:
        rdc = float(row.run_date_close)
        move = (st.new_actual - rdc) / rdc * 100.0
        values["next_day_direction_actual"] = (
            "bullish" if move > band else ("bearish" if move < -band else "neutral")
        )
        values["next_day_direction_correct"] = direction_hit(row.pred, st.new_actual, rdc, row.direction_pred)
    # The revision first: on PostgreSQL the database lets a filled actual change only when its logged
    # re-fill is there (revision 0037). The UPDATE's WHERE re-checks the old value: a concurrent change
    # makes it write nothing, and the savepoint takes the revision back with it.
    savepoint = conn.begin_nested()
    conn.execute(
        insert(fill_revisions).values(
            snapshot_id=st.id,
            ticker=st.ticker,
            run_date=st.run_date,
            horizon=st.horizon,
            old_actual=st.old_actual,
            new_actual=st.new_actual,
            old_pct_error=st.old_pct_error,
            new_pct_error=new_err,
            reason=st.reason,
            revised_at=now,
        )
    )
    done = conn.execute(
        update(snapshots).where(s.id == st.id, s[f"{st.horizon}_actual"] == st.old_actual).values(values)
    ).rowcount
    if done:
        savepoint.commit()
    else:
        savepoint.rollback()


def revisions(conn_or_engine, tickers: Sequence[str] | None = None) -> list[dict]:
    """The recorded re-fills, oldest first (the audit lists them: the old values stay visible)."""
    f = fill_revisions.c
    stmt = select(fill_revisions).order_by(f.id)
    if tickers:
        stmt = stmt.where(f.ticker.in_(list(tickers)))
    if isinstance(conn_or_engine, Engine):
        with conn_or_engine.connect() as conn:
            return [dict(r) for r in conn.execute(stmt).mappings()]
    return [dict(r) for r in conn_or_engine.execute(stmt).mappings()]


def refill_after_actions(engine: Engine, tickers: Sequence[str]) -> RefillResult | None:
    """Re-fill at once the actuals that corporate actions just recorded for `tickers` explain, so no
    reader scores a split as a -90 % day until the next fillback."""
    if not tickers:
        return None
    return refill(engine, automatic=True, tickers=sorted(set(tickers)))


def refill_after_ingest(engine: Engine, *results) -> RefillResult | None:
    """What every ingest path's caller (the `prices` asset, the `ldtm ingest` commands) runs after an
    ingest: the data layer reports which tickers got an action (`action_tickers` of an IngestResult,
    FileOutcome or FetchReport) and knows nothing of predictions, so re-filling is done here."""
    tickers = [t for result in results for t in getattr(result, "action_tickers", [])]
    return refill_after_actions(engine, tickers)
