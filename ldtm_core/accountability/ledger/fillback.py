"""Fillback (SPEC §8): add the actual closes to snapshot rows once their target dates have prices.

Each horizon is filled on its own (a next-day actual arrives weeks before the one-month one), all in
one set-based `UPDATE snapshots ... FROM (pending rows LEFT JOIN prices on ticker + target date)`:
the join is the single batched lookup of every needed close and the arithmetic runs in the database.
A value is written only where that actual is still NULL, and runs are serialised, so a rerun or a
concurrent run never fills anything twice. Prediction columns are never written,
so the audit chain stays valid. The dry run is one SELECT with the same three joins.
On PostgreSQL the UPDATE also returns the counts (the join runs once), and `snapshots` keeps room on
its pages (fillfactor, migration 0030) so a fill, which changes no indexed column, is a HOT update: no
new entry in any of the table's indexes, which was ~75 % of a 1,000 x 250 catch-up.

Ties: a next-day actual equal to the run-date close is a zero move, neither a hit nor a miss
of the model (or of any baseline): `next_day_direction_correct` is NULL, its direction label 'neutral'
(`direction_hit`, and the same rule in SQL here, in the re-fill, the audit and the accuracy views).

Price basis (SPEC §2): an actual is compared on the prediction's own basis, its run date's. A horizon
with a recorded corporate action between run date and target date is filled per row in Python with
the close divided by the actions' factors (corporate_actions.basis_factor); the rest stay set-based.

A ticker that leaves the universe keeps its record: its pending horizons fill from stored prices like
any other. Where its prices stop before a target date (delisted, or no longer ingested) and it was no
longer a member then (universe_membership), the horizon can never be filled: it is named in
`unfillable_actuals` with the reason (`unfillable`), never dropped, and the snapshot row is untouched.
A close that arrives later still fills it, and the mark goes.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

import numpy as np
from sqlalchemy import Engine, and_, case, delete, exists, func, insert, null, or_, select, update

from ldtm_core.accountability.ledger.target_prices import target_prices
from ldtm_core.data.corporate_actions import basis_factor, load_actions
from ldtm_core.data.membership import Membership, load_membership
from ldtm_core.db import is_postgres, run_in_transaction, write_lock
from ldtm_core.faults import pause_point
from ldtm_core.horizons import DIRECTION
from ldtm_core.horizons import NAMES as HORIZONS
from ldtm_core.schema import corporate_actions, prices, snapshots, unfillable_actuals

FILL_LOCK = "ldtm:fillback"
# The band of rows written before each row stored its own (migration 0017): the default they had.
LEGACY_NEUTRAL_BAND_PCT = 0.25


def row_band(stored: float | None, legacy: float = LEGACY_NEUTRAL_BAND_PCT) -> float:
    """The neutral band (%) a row is judged with: the one stored with its prediction."""
    return legacy if stored is None else float(stored)


# The move a stored direction calls, for a row with no predicted price (a direction-only submission).
CALLED_MOVE = {"bullish": 1, "neutral": 0, "bearish": -1}


def no_price(pred) -> bool:
    """No predicted price (NULL, read back as None or NaN): a horizon the submitted model left out."""
    return pred is None or (isinstance(pred, float) and np.isnan(pred))


def pct_error(pred: float | None, actual: float) -> float | None:
    """A horizon's error in percent of its actual; None where the row has no predicted price."""
    return None if no_price(pred) else (float(pred) - actual) / actual * 100.0


def direction_hit(
    pred: float | None, actual: float, close: float, direction: str | None = None
) -> bool | None:
    """Was the predicted next-day direction right? None on a tie (a zero move): scored by nobody. The call
    is the sign of the predicted move; a row with no predicted price calls its `direction` (direction_pred).
    A predicted zero move (or a neutral call) is a miss of any real move."""
    if actual == close:
        return None
    called = CALLED_MOVE[str(direction)] if no_price(pred) else np.sign(pred - close)
    return bool(called == np.sign(actual - close))


@dataclass
class PendingFill:
    id: int
    ticker: str
    run_date: dt.date
    horizon: str
    target_date: dt.date
    actual: float


@dataclass(frozen=True)
class Unfillable:
    """A pending horizon that can never be filled, and why (a row of unfillable_actuals)."""

    snapshot_id: int
    ticker: str
    run_date: dt.date
    horizon: str
    target_date: dt.date
    reason: str


@dataclass
class FillbackResult:
    dry_run: bool
    pending: list[PendingFill] = field(default_factory=list)
    filled: dict[str, int] = field(default_factory=lambda: dict.fromkeys(HORIZONS, 0))
    rows_pending: int = 0  # dry run: snapshot rows with at least one fillable horizon
    # Every pending horizon that can never be filled (its ticker left and its prices stop): marked in
    # unfillable_actuals (dry run: what would be), never dropped.
    unfillable: list[Unfillable] = field(default_factory=list)

    @property
    def total_filled(self) -> int:
        return sum(self.filled.values())


def _rebased(h: str):
    """A corporate action between the run date and this horizon's target date: its actual needs the
    basis rule (close / factors), done per row in Python; all other rows stay set-based in SQL."""
    s, ca = snapshots.c, corporate_actions.c
    return exists(
        select(ca.ticker).where(ca.ticker == s.ticker, ca.ex_date > s.run_date, ca.ex_date <= s[f"{h}_date"])
    )


def _on_basis(conn, rows) -> dict[str, list]:
    return load_actions(conn, sorted({r.ticker for r in rows})) if rows else {}


def _pending(conn) -> list:
    """Rows with a NULL actual whose target date has a price: one query, one outer join to prices per
    horizon."""
    frm, px = target_prices("p")
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
    fillable = [and_(s[f"{h}_actual"].is_(None), px[h].c.close.is_not(None)) for h in HORIZONS]
    return conn.execute(stmt.select_from(frm).where(or_(*fillable)).order_by(s.id)).all()


def fillback(engine: Engine, dry_run: bool = False, neutral_band_pct: float | None = None) -> FillbackResult:
    """Fill every horizon whose target date now has a price. Dry run: list the fills, write nothing.

    The actual's direction is judged with the band stored on the row (the one its prediction used), so
    changing LDTM_NEUTRAL_BAND_PCT later re-judges nothing; `neutral_band_pct` is only the band of rows
    written before the band was stored (default 0.25 %, what they were predicted with).
    """
    band = LEGACY_NEUTRAL_BAND_PCT if neutral_band_pct is None else float(neutral_band_pct)
    result = FillbackResult(dry_run=dry_run)
    if dry_run:
        with engine.connect() as conn:
            rows = _pending(conn)
            actions = _on_basis(conn, rows)
        result.rows_pending = len(rows)
        for r in rows:
            for h in HORIZONS:
                if getattr(r, f"{h}_open") and getattr(r, f"{h}_close") is not None:
                    day = getattr(r, f"{h}_date")
                    factor = basis_factor(actions.get(r.ticker, []), r.run_date, day)
                    result.pending.append(
                        PendingFill(
                            r.id,
                            r.ticker,
                            r.run_date,
                            h,
                            day,
                            float(getattr(r, f"{h}_close")) / factor,
                        )
                    )
        result.pending.sort(key=lambda p: (p.ticker, p.run_date, HORIZONS.index(p.horizon)))
        with engine.connect() as conn:
            result.unfillable = unfillable(conn, load_membership(engine))
        return result
    now = dt.datetime.now(dt.UTC)
    membership = load_membership(engine)

    def fill_and_mark(conn) -> dict[str, int]:
        filled = _fill(conn, band, now)
        result.unfillable = _mark_unfillable(conn, membership, now)
        return filled

    result.filled = run_in_transaction(engine, fill_and_mark)
    return result


def unfillable(conn, membership: Membership) -> list[Unfillable]:
    """Every pending horizon that can never be filled: its ticker left the universe (universe_membership)
    and has no stored close on or after the target date, while the market (some ticker) has one.

    Without a membership history nothing is unfillable here: a ticker whose prices stop is a data gap
    that freshness names, and its rows stay pending. Only tickers whose membership ended are read."""
    left = {t: membership.last_end(t) for t in membership.spans}
    left = {t: end for t, end in left.items() if end is not None}
    if not left:
        return []
    newest_market = conn.execute(select(func.max(prices.c.date))).scalar()
    if newest_market is None:
        return []
    last_close = dict(
        conn.execute(
            select(prices.c.ticker, func.max(prices.c.date))
            .where(prices.c.ticker.in_(left))
            .group_by(prices.c.ticker)
        ).all()
    )
    s = snapshots.c
    out: list[Unfillable] = []
    for h in HORIZONS:
        rows = conn.execute(
            select(s.id, s.ticker, s.run_date, s[f"{h}_date"].label("target"))
            .where(
                s.ticker.in_(left),
                s[f"{h}_actual"].is_(None),
                s[f"{h}_date"] <= newest_market,
            )
            .order_by(s.id)
        ).all()
        for r in rows:
            last = last_close.get(r.ticker)
            if (last is not None and last >= r.target) or membership.is_member(r.ticker, r.target):
                continue
            stop = f"its prices stop at {last}" if last is not None else "it has no stored prices"
            out.append(
                Unfillable(
                    r.id,
                    r.ticker,
                    r.run_date,
                    h,
                    r.target,
                    f"{r.ticker} left the universe on {left[r.ticker]} (universe_membership) and {stop}: no "
                    f"close on the target date {r.target}, so this {h} actual can never be filled; the "
                    f"prediction stays in the record, unscored",
                )
            )
    return sorted(out, key=lambda u: (u.ticker, u.run_date, HORIZONS.index(u.horizon)))


def _mark_unfillable(conn, membership: Membership, now: dt.datetime) -> list[Unfillable]:
    """Bring unfillable_actuals to `unfillable` (under the fill lock): a mark whose horizon is now filled,
    or no longer unfillable, goes; a new one is added with its reason."""
    found = unfillable(conn, membership)
    u = unfillable_actuals.c
    held = {(r.snapshot_id, r.horizon) for r in conn.execute(select(u.snapshot_id, u.horizon)).all()}
    keep = {(x.snapshot_id, x.horizon) for x in found}
    for sid, h in held - keep:
        conn.execute(delete(unfillable_actuals).where(u.snapshot_id == sid, u.horizon == h))
    new = [
        {
            "snapshot_id": x.snapshot_id,
            "horizon": x.horizon,
            "ticker": x.ticker,
            "target_date": x.target_date,
            "reason": x.reason,
            "marked_at": now,
        }
        for x in found
        if (x.snapshot_id, x.horizon) not in held
    ]
    if new:
        conn.execute(insert(unfillable_actuals), new)
    return found


def _sign(expr):
    return case((expr > 0, 1), (expr < 0, -1), else_=0)


def _called(pred, close):
    """SQL of `direction_hit`'s call: the predicted move's sign, or direction_pred's where no price."""
    by_label = case(*((snapshots.c.direction_pred == k, v) for k, v in CALLED_MOVE.items()), else_=0)
    return case((pred.is_(None), by_label), else_=_sign(pred - close))


def _fill(conn, band: float, now: dt.datetime) -> dict[str, int]:
    """Fill every horizon with ONE set-based UPDATE ... FROM (the pending join) and return counts.

    Each row is rewritten once, not once per horizon. A column that already holds a value is kept as it
    is (CASE ... WHEN actual IS NULL), and rows with nothing left to fill are not touched at all. On
    PostgreSQL the UPDATE returns which horizons it filled (a data-modifying CTE summed in the database),
    so the pending join runs once; SQLite's UPDATE ... FROM cannot return the FROM's columns, so there
    the counts come from the same join first (runs are serialised: they are exactly what it writes).
    """
    pause_point("fillback.before_lock")
    write_lock(conn, FILL_LOCK)
    s = snapshots.c
    frm, px = target_prices("p")
    # The rebased horizons are filled first, so the set-based UPDATE below finds them no longer NULL and
    # needs no per-row action check: a correlated EXISTS there made PostgreSQL misestimate the join
    # (rows=1 on fresh statistics) and pick a nested loop over the whole table (fillback 0.8 s -> 11 s+).
    rebased = _fill_rebased(conn, band, now, frm, px)
    fillable = {h: and_(s[f"{h}_actual"].is_(None), px[h].c.close.is_not(None)) for h in HORIZONS}
    pg = is_postgres(conn)
    if not pg:
        counts = conn.execute(_count(fillable, frm, fillable)).one()
        if not any(int(getattr(counts, h)) for h in HORIZONS):
            return {h: int(getattr(counts, h)) + rebased[h] for h in HORIZONS}
    v = (
        select(
            s.id.label("sid"),
            *(px[h].c.close.label(f"c_{h}") for h in HORIZONS),
            # Read before the write (the statement's snapshot): what this UPDATE fills, for RETURNING.
            *((fillable[h].label(f"f_{h}") for h in HORIZONS) if pg else ()),
        )
        .select_from(frm)
        .where(or_(*fillable.values()))
        .subquery("v")
    )
    values: dict = {"filled_at": now}
    for h in HORIZONS:
        actual = v.c[f"c_{h}"]
        fill = and_(s[f"{h}_actual"].is_(None), actual.is_not(None))
        values[f"{h}_actual"] = case((fill, actual), else_=s[f"{h}_actual"])
        values[f"{h}_filled_at"] = case((fill, now), else_=s[f"{h}_filled_at"])
        values[f"{h}_pct_error"] = case(
            (fill, (s[f"{h}_pred"] - actual) / actual * 100.0), else_=s[f"{h}_pct_error"]
        )
        if h == DIRECTION.name:
            move_pct = (actual - s.run_date_close) / s.run_date_close * 100.0
            b = func.coalesce(s.neutral_band_pct, band)
            direction = case((move_pct > b, "bullish"), (move_pct < -b, "bearish"), else_="neutral")
            correct = case(
                (actual == s.run_date_close, null()),  # a tie: neither right nor wrong
                else_=_called(s[f"{h}_pred"], s.run_date_close) == _sign(actual - s.run_date_close),
            )
            values["next_day_direction_actual"] = case((fill, direction), else_=s.next_day_direction_actual)
            values["next_day_direction_correct"] = case((fill, correct), else_=s.next_day_direction_correct)
    # The open-row filter repeats v's: it keeps the UPDATE's own scan of snapshots to the rows still open,
    # so the plan never hashes the whole (wide) table when few rows are pending or none can be filled.
    open_row = or_(*(s[f"{h}_actual"].is_(None) for h in HORIZONS))
    stmt = update(snapshots).where(s.id == v.c.sid, open_row).values(values)
    if pg:
        done = stmt.returning(*(v.c[f"f_{h}"] for h in HORIZONS)).cte("done")
        counts = conn.execute(_count({h: done.c[f"f_{h}"] for h in HORIZONS}, done)).one()
    else:
        conn.execute(stmt)
    pause_point("fillback.before_commit")
    return {h: int(getattr(counts, h)) + rebased[h] for h in HORIZONS}


def _count(flags: dict, frm, where: dict | None = None):
    """One row: per horizon, how many rows of `frm` have its flag set."""
    stmt = select(*(func.coalesce(func.sum(case((flags[h], 1), else_=0)), 0).label(h) for h in HORIZONS))
    stmt = stmt.select_from(frm)
    return stmt.where(or_(*where.values())) if where else stmt


def _fill_rebased(conn, band: float, now: dt.datetime, frm, px) -> dict[str, int]:
    """Fill the horizons with a corporate action between run date and target date, row by row: the
    actual is the target's close on the run date's basis (close / basis_factor), so a 10:1 split gives
    the same pct error and direction as no split. Rare (a few rows per action); counts per horizon."""
    s, ca = snapshots.c, corporate_actions.c
    filled = dict.fromkeys(HORIZONS, 0)
    # Only tickers with a recorded action, and run dates before the latest ex-date, can need the basis
    # rule: one lookup on the small actions table, and none of the per-row checks without any.
    latest = conn.execute(select(ca.ticker, func.max(ca.ex_date)).group_by(ca.ticker)).all()
    if not latest:
        return filled
    todo = {h: and_(s[f"{h}_actual"].is_(None), px[h].c.close.is_not(None), _rebased(h)) for h in HORIZONS}
    rows = conn.execute(
        select(
            s.id,
            s.ticker,
            s.run_date,
            s.run_date_close,
            s.neutral_band_pct,
            s.direction_pred,
            *(s[f"{h}_{c}"] for h in HORIZONS for c in ("pred", "date")),
            *(todo[h].label(f"{h}_todo") for h in HORIZONS),
            *(px[h].c.close.label(f"{h}_close") for h in HORIZONS),
        )
        .select_from(frm)
        .where(
            s.ticker.in_([t for t, _ in latest]),
            s.run_date < max(ex for _, ex in latest),
            or_(*todo.values()),
        )
        .order_by(s.id)
    ).all()
    actions = _on_basis(conn, rows)
    for r in rows:
        values: dict = {"filled_at": now}
        for h in HORIZONS:
            if not getattr(r, f"{h}_todo"):
                continue
            day = getattr(r, f"{h}_date")
            actual = float(getattr(r, f"{h}_close")) / basis_factor(
                actions.get(r.ticker, []), r.run_date, day
            )
            pred = getattr(r, f"{h}_pred")
            values[f"{h}_actual"] = actual
            values[f"{h}_filled_at"] = now
            values[f"{h}_pct_error"] = pct_error(pred, actual)
            if h == DIRECTION.name:
                rdc = float(r.run_date_close)
                move_pct = (actual - rdc) / rdc * 100.0
                b = row_band(r.neutral_band_pct, band)
                values["next_day_direction_actual"] = (
                    "bullish" if move_pct > b else ("bearish" if move_pct < -b else "neutral")
                )
                values["next_day_direction_correct"] = direction_hit(pred, actual, rdc, r.direction_pred)
            filled[h] += 1
        # Only actuals still NULL (the WHERE re-checks each one), so a rerun writes nothing twice.
        conn.execute(update(snapshots).where(s.id == r.id).values(values))
    return filled
