"""Corporate actions and the price basis (SPEC §2): record splits and dividends, apply them to read series.

The rule, in one place:
- `prices` keeps every bar on the basis it had on its own date (a raw close). Nothing stored is rewritten
  for an action; each action is a row of `corporate_actions` whose `factor` multiplies every price before
  `ex_date` onto the basis from `ex_date` on (10:1 split: 0.1; a dividend d on prev close c: 1 - d/c).
- A series read up to day D is put on D's basis: prices before an action's ex-date (ex-date <= D) are
  multiplied by its factor, volumes divided. Features and training therefore see one continuous series.
- A prediction made on run date R is on R's basis (its `run_date_close`); its actual at target T is the
  stored close at T divided by the factors of the actions with R < ex-date <= T (`basis_factor`).

Two source styles feed the table. Style 1 (raw closes plus events: yfinance auto_adjust=False + actions,
IB TRADES + its corporate-action feed) hands the events over with its answer. Style 2 (back-adjusted
history rewritten after each action: yfinance auto_adjust=True, IB ADJUSTED_LAST) is recognised by
`reconcile`: a re-ingest whose overlap with stored history is that history times one constant before a
date is an action; it is recorded and the rescaled rows are not merged. Any other change to older history
is refused for that ticker unless forced.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from sqlalchemy import Connection, Engine, select

from ldtm_core.config import setting_flag
from ldtm_core.db import upsert
from ldtm_core.errors import InputError
from ldtm_core.schema import corporate_actions, prices

log = logging.getLogger("ldtm.corporate_actions")

ENV_FORCE = "LDTM_FORCE_REINGEST"
PRICE_LEVELS = ("open", "high", "low", "close")
# Same bar: within float noise of what is stored. A back-adjusted source recomputes history from its
# own rounding, so "the stored bar on the new basis" is matched a little more loosely.
SAME_REL = 1e-6
ADJUSTED_REL = 5e-5
# One constant rescale: every changed bar's ratio (open/high/low/close) within this of their median, and
# every one of them on the same side of 1 by more than SAME_REL (a $0.01 dividend on a $140 close, a
# factor of 0.99993, is an action; a rescale within ADJUSTED_REL of 1 is taken for the stored bars).
CONSTANT_REL = 1e-3
# A rescale this far from 1 is a split (or reverse split); closer to 1 it is a dividend.
SPLIT_BAND = (0.8, 1.25)
# Revisions of the last stored session and the few before it are ordinary: the incremental fetch re-asks
# exactly those (price_fetch's overlap, 5 sessions before the last stored one, passed in here).
DEFAULT_REVISION_SESSIONS = 5


@dataclass(frozen=True)
class Action:
    ticker: str
    ex_date: dt.date
    factor: float
    kind: str  # split | dividend
    source: str = ""

    def describe(self) -> str:
        if self.kind == "split":
            ratio = 1.0 / self.factor
            return f"{self.ticker} {self.kind} {ratio:g}:1 ex {self.ex_date}"
        return f"{self.ticker} {self.kind} factor {self.factor:.6g} ex {self.ex_date}"


def force_from_env() -> bool:
    return setting_flag(ENV_FORCE)


def kind_of(factor: float) -> str:
    return "dividend" if SPLIT_BAND[0] < factor < SPLIT_BAND[1] else "split"


def split_factor(ratio: float) -> float:
    """A split of `ratio`:1 (yfinance 'Stock Splits' value; 0.1 for a 1:10 reverse split is 0.1:1)."""
    if not np.isfinite(ratio) or ratio <= 0:
        raise InputError(f"split ratio {ratio!r} is not a positive number")
    return 1.0 / float(ratio)


def dividend_factor(amount: float, prev_close: float) -> float:
    """Yahoo's convention: prices before the ex-date times (1 - dividend / previous close)."""
    if not (np.isfinite(amount) and np.isfinite(prev_close)) or amount <= 0 or prev_close <= amount:
        raise InputError(f"dividend {amount!r} on previous close {prev_close!r} gives no valid factor")
    return 1.0 - float(amount) / float(prev_close)


# --- the table ----------------------------------------------------------------------------------------


def record_actions(conn: Connection, actions: Iterable[Action]) -> int:
    """Insert actions not recorded yet (same ticker, ex-date and kind: kept as first recorded). Rows added."""
    now = dt.datetime.now(dt.UTC)
    rows = [
        {
            "ticker": a.ticker,
            "ex_date": a.ex_date,
            "kind": a.kind,
            "factor": float(a.factor),
            "source": a.source[:32] or "unknown",
            "recorded_at": now,
        }
        for a in actions
    ]
    for r in rows:
        if not (np.isfinite(r["factor"]) and r["factor"] > 0):
            raise InputError(
                f"{r['ticker']} {r['kind']} ex {r['ex_date']}: factor {r['factor']!r} must be > 0"
            )
    written = upsert(conn, corporate_actions, rows, key=["ticker", "ex_date", "kind"], update=None)
    for r in rows:
        log.info(
            "corporate action %s %s ex %s factor %.6g (%s)",
            r["ticker"],
            r["kind"],
            r["ex_date"],
            r["factor"],
            r["source"],
        )
    return written


def load_actions(
    conn_or_engine: Connection | Engine, tickers: Sequence[str] | None = None
) -> dict[str, list[Action]]:
    """Recorded actions per ticker, by ex-date (one query)."""
    c = corporate_actions.c
    stmt = select(c.ticker, c.ex_date, c.factor, c.kind, c.source).order_by(c.ticker, c.ex_date, c.kind)
    if tickers is not None:
        stmt = stmt.where(c.ticker.in_(list(tickers)))

    def run(conn: Connection) -> list:
        return conn.execute(stmt).all()

    if isinstance(conn_or_engine, Engine):
        with conn_or_engine.connect() as conn:
            rows = run(conn)
    else:
        rows = run(conn_or_engine)
    out: dict[str, list[Action]] = {}
    for r in rows:
        ex = pd.Timestamp(r.ex_date).date()
        out.setdefault(r.ticker, []).append(Action(r.ticker, ex, float(r.factor), r.kind, r.source))
    return out


# --- applying them --------------------------------------------------------------------------------------


def cumulative_factors(
    dates: Sequence, actions: Sequence[Action], as_of: dt.date | None = None
) -> np.ndarray:
    """Per date, the product of the factors of the actions with date < ex-date (<= as_of when given)."""
    days = np.asarray(pd.to_datetime(pd.Series(list(dates))).to_numpy(), dtype="datetime64[D]")
    out = np.ones(len(days), dtype=np.float64)
    for a in actions:
        if as_of is not None and a.ex_date > as_of:
            continue
        out[days < np.datetime64(a.ex_date, "D")] *= a.factor
    return out


def adjust_frame(
    frame: pd.DataFrame, actions: Sequence[Action], as_of: dt.date | None = None
) -> pd.DataFrame:
    """The frame on the basis of `as_of` (default: its last date): prices times, volumes divided by, the
    cumulative factors. Returned unchanged (same object) when no action applies."""
    if frame.empty or not actions:
        return frame
    if as_of is None:
        as_of = pd.Timestamp(frame["date"].iloc[-1]).date()
    cf = cumulative_factors(frame["date"], actions, as_of)
    if np.all(cf == 1.0):
        return frame
    out = frame.copy()
    for f in PRICE_LEVELS:
        if f in out.columns:
            out[f] = out[f].to_numpy(dtype=np.float64) * cf
    if "volume" in out.columns:
        out["volume"] = out["volume"].to_numpy(dtype=np.float64) / cf
    return out


def adjust_arrays(arrays: dict, actions: Sequence[Action], as_of: dt.date) -> dict:
    """`adjust_frame` for price_windows' {date, open, high, low, close, volume} numpy arrays."""
    if not actions:
        return arrays
    cf = cumulative_factors(arrays["date"], actions, as_of)
    if np.all(cf == 1.0):
        return arrays
    out = dict(arrays)
    for f in PRICE_LEVELS:
        out[f] = arrays[f] * cf
    out["volume"] = arrays["volume"] / cf
    return out


def basis_factor(actions: Sequence[Action], run_date: dt.date, target_date: dt.date) -> float:
    """Product of the factors of actions with run_date < ex-date <= target_date: the stored close at the
    target divided by this is the actual on the prediction's own (run date's) basis."""
    out = 1.0
    for a in actions:
        if run_date < a.ex_date <= target_date:
            out *= a.factor
    return out


def explains(actions: dict[str, list[Action]], rel: float = 0.05):
    """A price_moves Explainer: a move on an ex-date is explained when the close ratio is the combined
    factor of that day's actions within `rel` (a day's ordinary trading around it)."""

    def explained(ticker: str, day: dt.date, ratio: float) -> bool:
        todays = [a.factor for a in actions.get(ticker, []) if a.ex_date == day]
        if not todays:
            return False
        expected = float(np.prod(todays))
        return abs(ratio / expected - 1.0) <= rel

    return explained


# --- style 2: re-ingest of back-adjusted history ---------------------------------------------------------


class HistoryRewriteRefused(InputError):
    """A re-ingest would change stored history in a way no single corporate action explains."""


@dataclass
class Reconciled:
    frame: pd.DataFrame  # the rows to write (rescaled history left out)
    actions: list[Action] = field(default_factory=list)
    rescaled_rows: int = 0  # incoming bars that matched stored history on a new basis, not merged
    forced_rows: int = 0  # changed bars merged because the re-ingest was forced


def _rel(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.abs(a / b - 1.0)


def reconcile(
    conn: Connection,
    ticker: str,
    incoming: pd.DataFrame,
    *,
    source: str,
    force: bool = False,
    revision_sessions: int = DEFAULT_REVISION_SESSIONS,
) -> Reconciled:
    """Compare one ticker's validated incoming bars with what is stored and decide what to write.

    - Bars equal to the stored ones, or to them on the basis of the recorded actions: nothing to do.
    - Changed bars forming the start of the overlap, all the stored bar times one constant, with an
      unchanged or new bar after them: a new action ex that next date; recorded, the rescaled bars dropped.
    - Changed bars only among the last stored session and the `revision_sessions` before it (the
      incremental fetch's overlap): revisions, written.
    - Anything else: HistoryRewriteRefused naming the ticker and the first changed bar, unless `force`.
    """
    if incoming.empty:
        return Reconciled(incoming)
    inc = incoming.sort_values("date").reset_index(drop=True)
    inc_days = pd.to_datetime(inc["date"]).dt.date
    p = prices.c
    stored_rows = conn.execute(
        select(p.date, *(p[f] for f in PRICE_LEVELS))
        .where(p.ticker == ticker, p.date >= inc_days.iloc[0])
        .order_by(p.date)
    ).all()
    if not stored_rows:
        return Reconciled(inc)
    stored = pd.DataFrame(stored_rows, columns=["date", *PRICE_LEVELS])
    stored["date"] = pd.to_datetime(stored["date"]).dt.date
    last_stored = conn.execute(
        select(p.date).where(p.ticker == ticker).order_by(p.date.desc()).limit(revision_sessions + 1)
    ).all()
    revisable_from = pd.Timestamp(last_stored[-1][0]).date()
    actions = load_actions(conn, [ticker]).get(ticker, [])

    merged = inc.assign(_day=inc_days).merge(stored, left_on="_day", right_on="date", suffixes=("", "_s"))
    if merged.empty:
        return Reconciled(inc)
    new = merged[list(PRICE_LEVELS)].to_numpy(dtype=np.float64)
    old = merged[[f"{f}_s" for f in PRICE_LEVELS]].to_numpy(dtype=np.float64)
    # Stored bars on the latest basis: what a back-adjusted source would send for known actions.
    cf = cumulative_factors(merged["_day"], actions)[:, None]
    same_raw = (_rel(new, old) <= SAME_REL).all(axis=1)
    same_adjusted = (_rel(new, old * cf) <= ADJUSTED_REL).all(axis=1) & ~same_raw
    changed = ~(same_raw | same_adjusted)
    days = merged["_day"].to_numpy()
    drop_days = set(days[same_adjusted])
    result = Reconciled(inc)

    if changed.any():
        ratio = new[changed] / (old[changed] * cf[changed])
        median = float(np.median(ratio))
        first_unchanged = np.flatnonzero(~changed)
        prefix = (
            len(first_unchanged) == 0
            or changed[: first_unchanged[0]].all()
            and not changed[first_unchanged[0] :].any()
        )
        later = inc_days[inc_days > days[changed].max()]
        off_one = ratio - 1.0
        constant = bool(np.all(np.abs(ratio / median - 1.0) <= CONSTANT_REL)) and (
            bool(np.all(off_one > SAME_REL)) or bool(np.all(off_one < -SAME_REL))
        )
        # Two bars at least: one bar scaled in all four prices is more likely a revision than an action.
        if prefix and constant and len(later) and changed.sum() >= 2:
            ex = later.iloc[0]
            action = Action(ticker, ex, median, kind_of(median), source)
            result.actions.append(action)
            drop_days |= set(days[changed])
            log.warning(
                "%s: re-ingest from %s rescales stored history before %s by %.6g: recorded as %s",
                ticker,
                source,
                ex,
                median,
                action.describe(),
            )
        elif all(d >= revisable_from for d in days[changed]):
            pass  # revisions of the latest sessions: written like any overlap
        elif force:
            result.forced_rows = int(changed.sum())
            log.warning(
                "%s: forced re-ingest from %s overwrites %d stored bars", ticker, source, result.forced_rows
            )
        else:
            i = int(np.flatnonzero(changed)[0])
            # Name the level that changed (an open revised under an unchanged close read "close 5 -> 5").
            k = int(np.argmax(_rel(new[i : i + 1], old[i : i + 1])[0]))
            raise HistoryRewriteRefused(
                f"{ticker}: re-ingest from {source} changes {int(changed.sum())} stored bars between "
                f"{days[changed].min()} and {days[changed].max()} (first: {days[i]} {PRICE_LEVELS[k]} "
                f"{old[i, k]:g} -> {new[i, k]:g}) in a way that is not one constant rescale before a date (a split or "
                f"dividend); nothing stored for {ticker} was changed. Check the source; to overwrite the "
                f"stored history anyway re-run with --force (or {ENV_FORCE}=1)"
            )
    if drop_days:
        keep = ~inc_days.isin(drop_days)
        result.rescaled_rows = int((~keep).sum())
        result.frame = inc[keep.to_numpy()].reset_index(drop=True)
    return result
