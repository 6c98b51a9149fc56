"""The stored rows the board is computed from, read within the windows it scores (the
board's cost flat in the stored years).

`read_view` reads an accuracy view (migrations 0017, 0021, 0024) restricted to the evenings near the
newest filled ones, and proves that bound lost no row the view's windows use (else a wider read, else
the whole view). `next_day_rows` / `scored_rows` give the per-row flags of the exact tests on the views'
own selection, and `recent_next_day` the plot's last sessions, read newest first in the same way.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

import numpy as np
import pandas as pd
from sqlalchemy import Date, Engine, bindparam, func, select, text

from ldtm_core import accuracy_views
from ldtm_core.data.membership import load_membership
from ldtm_core.horizons import DIRECTION, ERROR_ONLY
from ldtm_core.learning.registry import UNPUBLISHED
from ldtm_core.schema import snapshots
from ldtm_core.scoring import baselines

# Days a window's newest date is searched below the newest filled one (the evenings after it may be
# in-sample, ungated or not an evening's first row): a wider first read spares most second reads.
SLACK_DAYS = 7
LATEST = {h.name: f"{accuracy_views.LATEST_PREFIX}{h.name}" for h in (DIRECTION, *ERROR_ONLY)}


# The views (migrations 0017, 0021): first row per evening or per model; in-sample and ungated rows
# left out unless the view's name says they are kept.
TICKER_VIEW = "accuracy_30d"
TICKER_VIEW_WITH_IN_SAMPLE = "accuracy_30d_with_in_sample"
MODEL_VIEW = "accuracy_30d_by_model"
MODEL_VIEW_WITH_IN_SAMPLE = "accuracy_30d_by_model_with_in_sample"


def view_name(by_model: bool, include_in_sample: bool, include_ungated: bool) -> str:
    """The accuracy view for these choices (fixed names only: never user text)."""
    name = MODEL_VIEW if by_model else TICKER_VIEW
    if include_in_sample and include_ungated:
        return f"{name}_with_in_sample_and_ungated"
    if include_in_sample:
        return f"{name}_with_in_sample"
    return f"{name}_with_ungated" if include_ungated else name


@dataclass(frozen=True)
class Bounds:
    """What a bounded read of a view found: every row the view used has run_date >= since, and each
    horizon's window ends at latest[name] (None: that horizon has no filled row, no window)."""

    since: dt.date
    latest: dict[str, dt.date | None]


def read_view(engine: Engine, view: str, columns: list[str], mode: str) -> tuple[pd.DataFrame, Bounds | None]:
    """The view's rows of `mode`, read from the evenings its windows cover only (the board's
    cost flat in the stored years) and identical to the whole view's; the whole view is read when the
    bound cannot be shown to hold (nothing filled yet, or no scored row near the newest filled ones).
    Returns the rows and the bounds they were read within (None when the whole view was read)."""
    df, bounds = _read_bounded(engine, view, columns)
    if bounds is None:
        cols = ", ".join(columns)
        # Fixed view and column names from the board's modules and a bound parameter: no user text.
        stmt = text(f"SELECT {cols} FROM {view} WHERE mode = :mode")  # noqa: S608
        with engine.connect() as conn:
            df = pd.DataFrame(conn.execute(stmt, {"mode": mode}).all(), columns=columns)
    else:
        df = df[df["mode"] == mode].reset_index(drop=True)
    return df, bounds


def _read_bounded(engine: Engine, view: str, columns: list[str]) -> tuple[pd.DataFrame, Bounds | None]:
    """The view's rows (every mode) from snapshot rows with run_date >= a bound, when that bound provably
    loses none of them (accuracy_views.bounded_select_sql). A window is kept whole when its newest date
    found in the bounded rows minus 29 days is at or above the bound its horizon asked for: a scored row
    above that newest date would itself lie inside the rows read. Two reads at most; None otherwise."""
    newest = _newest_filled(engine)
    if newest[DIRECTION.name] is None:
        return pd.DataFrame(columns=columns), None
    # The lowest date each window may start at: its newest filled date, less the window and the slack.
    low = {h: None if d is None else d - dt.timedelta(days=29 + SLACK_DAYS) for h, d in newest.items()}
    sql = accuracy_views.bounded_select_sql(view, engine.dialect.name)
    # Fixed SQL from the view builder; the bound is a parameter (typed: SQLite stores dates as text).
    stmt = text(f"SELECT {', '.join([*columns, *LATEST.values()])} FROM ({sql}) b").bindparams(  # noqa: S608
        bindparam("since", type_=Date)
    )
    for _ in range(2):
        since = _earliest_run_date(engine, low)
        with engine.connect() as conn:
            df = pd.DataFrame(
                conn.execute(stmt, {"since": since}).all(),
                columns=[*columns, *LATEST.values()],
            )
        if df.empty:
            return df, None
        latest = {h: as_date(df[c].iloc[0]) for h, c in LATEST.items()}
        retry = False
        for h, d in latest.items():
            if low[h] is None or (d is not None and d - dt.timedelta(days=29) >= low[h]):
                continue  # a horizon with nothing filled anywhere has no window; this one is whole
            if d is None or d < low[h]:
                return df, None  # its newest scored date may lie below the rows read
            low[h], retry = d - dt.timedelta(days=29), True  # that date is exact: read down to its window
        if not retry:
            return df.drop(columns=list(LATEST.values())), Bounds(since, latest)
    return df, None


def _newest_filled(engine: Engine) -> dict[str, dt.date | None]:
    """Each horizon's newest filled date over every non-shadow row (an upper bound of the views' latest
    dates: they take the max over fewer rows). By index, newest first: run_date, then each target date."""
    s = snapshots.c
    stmts = {DIRECTION.name: select(func.max(s.run_date)).where(s.next_day_actual.is_not(None))}
    for h in ERROR_ONLY:
        stmts[h.name] = select(func.max(s[h.col("date")])).where(s[h.col("pct_error")].is_not(None))
    with engine.connect() as conn:
        return {
            h: as_date(conn.execute(stmt.where(s.model_status.not_in(UNPUBLISHED))).scalar_one())
            for h, stmt in stmts.items()
        }


def _earliest_run_date(engine: Engine, low: dict[str, dt.date | None]) -> dt.date:
    """The lowest run date a read must start at so that it holds every row of run_date >= low[next_day]
    and every row whose target date of another horizon is >= low[that horizon] (by the target-date
    indexes, migration 0029: the rows near the newest ones only)."""
    s = snapshots.c
    since = low[DIRECTION.name]
    with engine.connect() as conn:
        for h in ERROR_ONLY:
            if low[h.name] is None:
                continue
            # Grouped by the target date: the min over the target-date range, which SQLite would
            # otherwise look for by scanning the run_date index from the oldest row.
            date = s[h.col("date")]
            stmt = select(func.min(s.run_date)).where(date >= low[h.name]).group_by(date)
            since = min([since, *(as_date(d) for d in conn.execute(stmt).scalars())])
    return since


def as_date(value) -> dt.date | None:
    """A date from either database (SQLite returns text from views and aggregates)."""
    return None if value is None or value is pd.NaT else pd.Timestamp(value).date()


def next_day_rows(engine: Engine, tickers: list[str], start, end) -> pd.DataFrame:
    """Every filled, non-shadow row of these tickers with run dates in start..end (id order), with the
    per-row flags the tests use: model_right, `{name}_has` / `{name}_right` of each board baseline
    (`row_calls`), and `member`: its ticker was a member of the universe on the evening (data.membership)."""
    s = snapshots.c
    stmt = (
        select(
            s.id,
            s.ticker,
            s.model_version,
            s.run_date,
            s.mode,
            s.in_sample,
            s.model_status,
            s.next_day_direction_correct,
            s.next_day_actual,
            s.run_date_close,
            s.prev_close,
            s.baseline_calls,
            s.chain_version,
        )
        .where(
            s.ticker.in_(tickers),
            s.model_status.not_in(UNPUBLISHED),
            s.run_date >= start,
            s.run_date <= end,
        )
        .order_by(s.id)
    )
    with engine.connect() as conn:
        rows = pd.DataFrame(conn.execute(stmt).mappings().all())
    if rows.empty:
        return rows
    rows["run_date"] = pd.to_datetime(rows["run_date"]).dt.date
    rows["member"] = load_membership(engine).row_mask(rows["ticker"], rows["run_date"])
    close = rows["run_date_close"].to_numpy(float)
    actual = rows["next_day_actual"].to_numpy(float)
    # A zero move (tie) is nobody's hit or miss (docs/architecture.md): out of every direction test.
    rows["filled"] = rows["next_day_actual"].notna() & (actual != close)
    rows["model_right"] = rows["next_day_direction_correct"].fillna(False).astype(bool)
    truth = np.sign(actual - close)
    for name, call in row_calls(rows).items():
        # Each board baseline's flags (board_stats.flags): it made a call; that call was right.
        rows[f"{name}_has"] = ~np.isnan(call)
        rows[f"{name}_right"] = call == truth
    return rows


def row_calls(rows: pd.DataFrame) -> dict[str, np.ndarray]:
    """Each board baseline's call per snapshot row, never from the prices table: the call recorded with
    the prediction (snapshots.baseline_calls, hashed from chain version 3) where the row has one, else the rule on
    the row's own recorded closes (`prev_close`, `run_date_close`, hashed with it; no call for a baseline
    that reads more closes): a price revised after the evening cannot change a call."""
    out = baselines.recorded_close_calls(
        rows["run_date_close"].to_numpy(float), rows["prev_close"].to_numpy(float)
    )
    if "baseline_calls" not in rows:
        return out
    hashed = rows["chain_version"].fillna(1).to_numpy(int) >= 3  # the calls the row hash covers
    for i, stored in enumerate(rows["baseline_calls"].to_numpy()):
        if not hashed[i] or stored is None or (isinstance(stored, float) and np.isnan(stored)):
            continue
        for name, call in baselines.decode_calls(stored).items():
            if name in out:
                out[name][i] = call
    return out


def scored_rows(
    rows: pd.DataFrame, mode: str, *, by_model: bool, include_in_sample: bool, include_ungated: bool
) -> pd.DataFrame:
    """The rows a board scores (the views' selection, migrations 0017/0021/0024/0034): the first recorded
    row of each (ticker, evening) on the ticker board, every row on the per-model board; in-sample and
    ungated rows dropped unless asked for; filled; its ticker a member on the evening; this mode."""
    if rows.empty:
        return rows
    rows = rows[rows["member"]]
    if not by_model:
        rows = rows.drop_duplicates(["ticker", "run_date"], keep="first")
    if not include_in_sample:
        rows = rows[~rows["in_sample"].astype(bool)]
    if not include_ungated:
        rows = rows[rows["model_status"] == "active"]
    rows = rows[rows["filled"]]
    if mode != "all":
        rows = rows[rows["mode"] == mode]
    return rows


# Calendar days per session, generously (weekends, holidays): how far back the plot's reads reach.
DAYS_PER_SESSION = 2
RECENT_SLACK_DAYS = 14


def newest_filled_run_dates(engine: Engine, tickers: list[str], mode: str = "all") -> dict[str, dt.date]:
    """Each ticker's newest evening with a filled next-day actual (non-shadow; of `mode` unless "all"),
    tickers with none left out. Since inception, but read newest first per ticker through
    uq_snapshots_ticker_date_model (ticker, run_date, ...): each probe stops at the ticker's newest filled
    row instead of reading its record."""
    s = snapshots.c
    newest = (
        select(s.run_date)
        .where(s.ticker == bindparam("t"), s.next_day_actual.is_not(None), s.model_status.not_in(UNPUBLISHED))
        .order_by(s.run_date.desc())
        .limit(1)
    )
    if mode != "all":
        newest = newest.where(s.mode == mode)
    with engine.connect() as conn:
        found = {t: conn.execute(newest, {"t": t}).scalar_one_or_none() for t in tickers}
    return {t: as_date(d) for t, d in found.items() if d is not None}


def recent_next_day(engine: Engine, tickers: list[str], sessions: int = 30) -> pd.DataFrame:
    """Filled next-day predictions of these tickers, the last `sessions` scored evenings each (read-only):
    the first recorded row of an evening, out of sample and gated, as the board scores it.

    Read from the evenings near the newest filled one only (flat in the stored years). Every row
    of an evening shares its run_date, so a bounded read chooses each evening's first row right and only
    its count can fall short: a ticker short of `sessions` there (stale, or new) is read again from its
    own newest filled evening, and whole when even that falls short (mostly in-sample or ungated)."""
    newest = newest_filled_run_dates(engine, list(tickers))
    if not newest:  # nothing filled: nothing to plot
        return _recent_rows(engine, [], None, sessions)
    span = dt.timedelta(days=DAYS_PER_SESSION * sessions + RECENT_SLACK_DAYS)
    end = max(newest.values())
    recent = _recent_rows(engine, list(newest), end - span, sessions)
    counts = recent["ticker"].value_counts()
    short = [t for t in newest if counts.get(t, 0) < sessions]
    parts, whole = [recent[~recent["ticker"].isin(short)]], []
    for t in short:
        # From its own newest evening, when that lies below the common one (else it is the same read).
        own = _recent_rows(engine, [t], newest[t] - span, sessions) if newest[t] < end else None
        if own is not None and len(own) >= sessions:
            parts.append(own)
        else:
            whole.append(t)
    if whole:
        parts.append(_recent_rows(engine, whole, None, sessions))
    out = pd.concat(parts, ignore_index=True)
    return out.sort_values(["ticker", "run_date"], kind="stable").reset_index(drop=True)


def _recent_rows(engine: Engine, tickers: list[str], since: dt.date | None, sessions: int) -> pd.DataFrame:
    s = snapshots.c
    stmt = (
        select(
            s.ticker,
            s.run_date,
            s.next_day_date,
            s.next_day_pred,
            s.next_day_actual,
            s.in_sample,
            s.model_status,
        )
        .where(s.ticker.in_(tickers), s.next_day_actual.is_not(None), s.model_status.not_in(UNPUBLISHED))
        .order_by(s.ticker, s.run_date, s.id)
    )
    if since is not None:
        stmt = stmt.where(s.run_date >= since)
    with engine.connect() as conn:
        df = pd.DataFrame(
            conn.execute(stmt).all(),
            columns=["ticker", "run_date", "target", "pred", "actual", "in_sample", "model_status"],
        )
    # One row per (ticker, evening): the first recorded, out of sample, gated and a member, as the board
    # scores it.
    df = df.drop_duplicates(["ticker", "run_date"], keep="first")
    member = load_membership(engine).row_mask(df["ticker"], pd.to_datetime(df["run_date"]))
    df = df[~df.pop("in_sample").astype(bool) & (df.pop("model_status") == "active") & member]
    return df.groupby("ticker", group_keys=False).tail(sessions).reset_index(drop=True)
