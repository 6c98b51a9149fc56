"""Signal performance, part 1: which rows, and their predicted and realised returns (SPEC §15).

The board's rule (accountability.board.leaderboard, the views of migrations 0017/0021/0024): one row per
(ticker, evening), the first one recorded among the non-shadow rows, i.e. what was published; then
in-sample replays and ungated evenings (a candidate predicted) are dropped unless asked for, and the mode
(live / replay) is chosen. `shadow=True` is a what-if: on evenings a shadow model predicted, its row takes
the published row's place (never what was published; accountability.shadow decides on it).

Returns, per horizon h: predicted = `{h}_pred / run_date_close - 1`; realised = `{h}_actual /
run_date_close - 1`, where the stored actual is the one fillback wrote, already on the prediction's own
basis (corporate_actions.basis_factor), so a split between run date and target is never a -90 % day.
The benchmark's returns come from the same basis rule: the closes times `cumulative_factors`, as `load_prices(adjusted=True)`.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from sqlalchemy import Engine, select

from ldtm_core.accountability.board.leaderboard import MODES
from ldtm_core.accountability.ledger.fillback import CALLED_MOVE, HORIZONS
from ldtm_core.data.corporate_actions import cumulative_factors, load_actions
from ldtm_core.data.feature_store import copy_out
from ldtm_core.data.membership import Membership, load_membership
from ldtm_core.db import is_postgres
from ldtm_core.errors import InputError
from ldtm_core.horizons import HORIZONS as ALL_HORIZONS
from ldtm_core.learning.registry import SHADOW, UNPUBLISHED
from ldtm_core.schema import prices, snapshots

# Sessions each horizon spans (next Monday: 1 to 5): how far consecutive evenings' targets overlap.
HORIZON_SESSIONS = {h.name: h.overlap for h in ALL_HORIZONS}


@dataclass(frozen=True)
class RowChoice:
    """Which published rows a report stands on; the defaults are the production record."""

    mode: str = "all"
    include_in_sample: bool = False
    include_ungated: bool = False
    shadow: bool = False
    start: dt.date | None = None
    end: dt.date | None = None

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise InputError(f"signals mode must be one of {', '.join(MODES)}, not {self.mode!r}")
        if self.start and self.end and self.start > self.end:
            raise InputError(f"signals: --start {self.start} is after --end {self.end}")

    def describe(self) -> str:
        parts = [
            "first published row per (ticker, evening)",
            f"mode {self.mode}",
            "in-sample included" if self.include_in_sample else "out of sample",
            "ungated included" if self.include_ungated else "gated (active models) only",
        ]
        if self.shadow:
            parts.append("shadow rows in place of the published row where a shadow predicted (what-if)")
        return "; ".join(parts)


PRODUCTION = RowChoice()  # the default: the gated, out-of-sample published record


@dataclass
class Rows:
    """The chosen rows (one per ticker and evening) and what the choice left out."""

    rows: pd.DataFrame
    universe: list[str]
    hidden_in_sample: int
    hidden_ungated: int
    hidden_mode: int
    dropped: pd.DataFrame  # ticker, run_date, reason: the first rows the flags left out
    membership: Membership = field(default_factory=Membership)  # who counts on which evening
    hidden_non_member: int = 0  # rows of evenings their ticker was not a member (a history imported later)


COLUMNS = ["ticker", "run_date", "mode", "in_sample", "model_status", "model_version"]
COLUMNS += ["direction_pred", "run_date_close"]
COLUMNS += [f"{h}_{c}" for h in HORIZONS for c in ("date", "pred", "actual")]
DATES = ["run_date"] + [f"{h}_date" for h in HORIZONS]
BOOLEANS = {"in_sample"}


def _read(engine: Engine, columns: list[str], table, date_col: str, start, end, order: str) -> pd.DataFrame:
    """Fixed columns of `table` between two dates as a DataFrame, dates as datetime64.

    PostgreSQL: COPY to CSV through the driver's own parameter binding, parsed by pandas' C reader
    (a five-year, 103-ticker read is most of the report's time through row fetching)."""
    dates = [c for c in columns if c == date_col or c.endswith("_date")]
    if is_postgres(engine):
        # Fixed column and table names from this module; the dates are bound by the driver. Dates leave
        # as whole days since 1970 (far cheaper to print and parse than ISO text).
        where = " AND ".join(
            [f"{date_col} >= %(start)s"] * (start is not None)
            + [f"{date_col} <= %(end)s"] * (end is not None)
        )
        select_list = ", ".join(f"{c} - DATE '1970-01-01'" if c in dates else c for c in columns)
        query = f"SELECT {select_list} FROM {table.name}"  # noqa: S608
        query += f" WHERE {where}" if where else ""
        with engine.connect() as conn:
            buf = copy_out(conn, f"{query} ORDER BY {order}", {"start": start, "end": end})
        frame = pd.read_csv(buf, names=columns, keep_default_na=False, na_values=[""], dtype={"ticker": str})
        for c in set(columns) & BOOLEANS:
            frame[c] = frame[c].astype(str) == "t"  # PostgreSQL's CSV spelling of a boolean
        for c in dates:
            frame[c] = pd.to_datetime(frame[c].to_numpy(dtype="int64").astype("datetime64[D]"))
        return frame
    stmt = select(*[table.c[c] for c in columns])
    if start is not None:
        stmt = stmt.where(table.c[date_col] >= start)
    if end is not None:
        stmt = stmt.where(table.c[date_col] <= end)
    with engine.connect() as conn:
        rows = conn.execute(stmt.order_by(*[table.c[c.strip()] for c in order.split(",")])).all()
    frame = pd.DataFrame(rows, columns=columns)
    for c in dates:
        frame[c] = pd.to_datetime(frame[c], format="ISO8601")
    return frame


def load_rows(engine: Engine, choice: RowChoice = PRODUCTION) -> Rows:
    """The rows `choice` selects, with `pred_{h}` / `real_{h}` returns (real NaN until filled).

    One query over the date range; the first-row rule and the flags are applied here in the same order
    as the views (first non-shadow row, then the filters), so a later row of an evening never stands in
    for a dropped first row."""
    raw = _read(engine, COLUMNS, snapshots, "run_date", choice.start, choice.end, "id")
    raw["in_sample"] = raw["in_sample"].astype(bool)
    universe = sorted(raw["ticker"].unique()) if len(raw) else []
    shadow_rows = raw[raw["model_status"] == SHADOW]
    first = raw[~raw["model_status"].isin(UNPUBLISHED)].drop_duplicates(["ticker", "run_date"], keep="first")
    in_sample = first["in_sample"].astype(bool)
    ungated = first["model_status"] != "active"
    wrong_mode = first["mode"] != choice.mode if choice.mode != "all" else pd.Series(False, first.index)
    keep = ~wrong_mode
    if not choice.include_in_sample:
        keep &= ~in_sample
    if not choice.include_ungated:
        keep &= ~ungated
    # What the flags hid (each row counted once, in-sample first), for the report's notes.
    hid_in_sample = ~wrong_mode & in_sample & (not choice.include_in_sample)
    hid_ungated = ~wrong_mode & ~hid_in_sample & ungated & (not choice.include_ungated)
    hidden = (int(hid_in_sample.sum()), int(hid_ungated.sum()), int(wrong_mode.sum()))
    reason = np.select(
        [wrong_mode, hid_in_sample, hid_ungated], ["other mode", "in-sample", "ungated (candidate)"], ""
    )
    # A row of an evening its ticker was not a member (recorded before a history was imported) stays in
    # the record but not in the books: a book holds a ticker only while it is a member.
    membership = load_membership(engine)
    member = _member_flags(membership, first)
    hid_member = ~wrong_mode & ~hid_in_sample & ~hid_ungated & ~member & keep
    keep &= member
    reason = np.where(hid_member, "not a member of the universe that evening", reason)
    dropped = first.assign(reason=reason)[~keep][["ticker", "run_date", "reason"]]
    rows = first[keep]
    if choice.shadow and len(shadow_rows):
        shadow_first = shadow_rows.drop_duplicates(["ticker", "run_date"], keep="first")
        if choice.mode != "all":
            shadow_first = shadow_first[shadow_first["mode"] == choice.mode]
        if not choice.include_in_sample:
            shadow_first = shadow_first[~shadow_first["in_sample"].astype(bool)]
        rows = pd.concat([shadow_first, rows]).drop_duplicates(["ticker", "run_date"], keep="first")
    if membership.has_history and len(rows):
        rows = rows[_member_flags(membership, rows)]
    return Rows(
        with_returns(rows),
        universe,
        *hidden,
        dropped.reset_index(drop=True),
        membership,
        int(hid_member.sum()),
    )


def _member_flags(membership: Membership, frame: pd.DataFrame) -> np.ndarray:
    """Per row: was its ticker a member on its evening (all True without a stored history)?"""
    flags = np.ones(len(frame), dtype=bool)
    if not membership.has_history:
        return flags
    tickers, days = frame["ticker"].to_numpy(), frame["run_date"].to_numpy()
    for t in set(tickers):
        at = tickers == t
        flags[at] = membership.mask(t, days[at])
    return flags


def member_matrix(membership: Membership, dates, tickers) -> np.ndarray:
    """dates x tickers: was each ticker a member on each date (all True without a history)."""
    return (
        np.column_stack([membership.mask(t, dates) for t in tickers])
        if len(tickers)
        else np.ones((len(dates), 0), bool)
    )


def with_returns(rows: pd.DataFrame) -> pd.DataFrame:
    """Typed columns and the returns of every horizon (a pure function: tests feed it frames).

    Dates stay datetime64 here (fast pivots); what leaves the package is converted (`as_dates`)."""
    out = rows.sort_values(["run_date", "ticker"]).reset_index(drop=True).copy()
    for c in DATES:
        out[c] = pd.to_datetime(out[c])
    out["in_sample"] = out["in_sample"].astype(bool)
    # Integer codes (sorted) of the evening and the ticker, and the published side: what the matrices
    # and books are indexed by (string and date work once here, not per matrix).
    out["day_code"] = pd.factorize(out["run_date"], sort=True)[0]
    out["name_code"] = pd.factorize(out["ticker"], sort=True)[0]
    out["side"] = out["direction_pred"].map(CALLED_MOVE).fillna(0).astype(int)
    close = out["run_date_close"].to_numpy(dtype=float)
    for h in HORIZONS:
        out[f"pred_{h}"] = out[f"{h}_pred"].to_numpy(dtype=float) / close - 1.0
        out[f"real_{h}"] = (
            pd.to_numeric(out[f"{h}_actual"], errors="coerce").to_numpy(dtype=float) / close - 1.0
        )
    return out


def as_dates(index) -> list[dt.date]:
    """datetime64 values -> datetime.date (the report's evenings)."""
    return [pd.Timestamp(d).date() for d in index]


def benchmark_returns(engine: Engine, tickers: list[str], evenings: list) -> pd.Series:
    """The equal-weight universe's return from each evening's close to the next session's close (the
    `same_close` rule; signals.execution.benchmark holds it by the lagged rules).

    Every ticker of `tickers` with a bar on both sessions counts that evening. The closes are put on one
    basis with the recorded corporate actions (`cumulative_factors`, as `load_prices(adjusted=True)`
    does), so a split divides out exactly as in fillback's basis factor. The next session is the next
    date any of them has a bar. Indexed by the evenings as given."""
    if not tickers or not len(evenings):
        return pd.Series(dtype=float)
    days = pd.to_datetime(pd.Series(list(evenings)))
    start, end = days.min().date(), (days.max() + pd.Timedelta(days=10)).date()
    frame = _read(engine, ["ticker", "date", "close"], prices, "date", start, end, "ticker, date")
    frame = frame[frame["ticker"].isin(set(tickers))]
    closes = frame.pivot(index="date", columns="ticker", values="close").astype(float)
    actions = load_actions(engine, list(closes.columns))
    for t, acts in actions.items():
        # On the basis of the last date read: every return inside the window compares like with like.
        closes[t] = closes[t].to_numpy() * cumulative_factors(closes.index, acts, closes.index[-1].date())
    out = equal_weight_next(closes, member_matrix(load_membership(engine), closes.index, closes.columns))
    return pd.Series(out.reindex(pd.DatetimeIndex(days)).to_numpy(), index=pd.Index(list(evenings))).astype(
        float
    )


def equal_weight_next(closes: pd.DataFrame, members: np.ndarray | None = None) -> pd.Series:
    """Mean over tickers of close(next date) / close(date) - 1, per date (NaN where no ticker has both),
    over the tickers `members` (dates x tickers) marks as members on the date."""
    if closes.empty:
        return pd.Series(dtype=float)
    values = closes.to_numpy(dtype=float)
    nxt = np.vstack([values[1:], np.full((1, values.shape[1]), np.nan)])
    with np.errstate(invalid="ignore", divide="ignore"):
        ret = nxt / values - 1.0
    ok = np.isfinite(ret) if members is None else np.isfinite(ret) & members
    n = ok.sum(axis=1)
    total = np.where(ok, ret, 0.0).sum(axis=1)
    return pd.Series(np.where(n > 0, total / np.maximum(n, 1), np.nan), index=closes.index)
