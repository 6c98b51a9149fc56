"""Signal performance: when the paper books trade an evening's signals, and what they earn.

A prediction for evening T is published after T's close and takes that close as an input, so a book
entered at T's close trades at a price nobody could get. The rules (LDTM_SIGNAL_EXECUTION, `ldtm signals
--execution`), each holding the book one session:
- `next_close` (the default): enter at the close of the session after T (T+1), exit at T+2's close
  (Qlib's label Ref($close, -2) / Ref($close, -1) - 1);
- `next_open`: enter at T+1's open, exit at T+2's open (both overnight gaps inside the holding);
- `same_close`: enter at T's own close, exit at T+1's close, i.e. the row's filled-back next-day return
  (the old rule, kept as a reference: not tradable, an upper bound).
Sessions are the dates any ticker of the universe has a bar, as rows.benchmark_returns; a ticker without
a bar on its entry or exit session is out of that evening's book. The prices are put on one basis with
the recorded corporate actions (`cumulative_factors`, as benchmark_returns), so a split between entry and
exit divides out. The equal-weight benchmark is held by the same rule as the books.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

import numpy as np
import pandas as pd
from sqlalchemy import Engine

from ldtm_core.accountability.signals.rows import Rows, _read, as_dates, benchmark_returns, member_matrix
from ldtm_core.config import SETTINGS, setting_choice
from ldtm_core.data.corporate_actions import cumulative_factors, load_actions
from ldtm_core.data.membership import Membership
from ldtm_core.schema import prices

SETTING = "LDTM_SIGNAL_EXECUTION"
EXECUTIONS = SETTINGS[SETTING].choices  # next_close, next_open, same_close: the settings table's vocabulary
DEFAULT_EXECUTION = SETTINGS[SETTING].default  # next_close
SAME_CLOSE = "same_close"
UPPER_BOUND = "not tradable: upper bound"
RULES = {
    "next_close": "enter at the close of the session after the evening (T+1), exit at the next close (T+2)",
    "next_open": "enter at the open of the session after the evening (T+1), exit at the next open (T+2)",
    "same_close": "enter at the evening's own close (T, an input of the prediction), exit at the next close "
    f"(T+1): {UPPER_BOUND}",
}
# Calendar days read past the last evening: T+2 is at most 6 away over a long weekend and a holiday.
LOOKAHEAD_DAYS = 14


def execution_from_env() -> str:
    """The rule LDTM_SIGNAL_EXECUTION names (default next_close), checked."""
    return setting_choice(SETTING)


def checked_execution(rule: str | None) -> str:
    """`--execution` (or LDTM_SIGNAL_EXECUTION when None) as the settings table spells it; a ConfigError
    naming the option and the rules otherwise."""
    return execution_from_env() if rule is None else SETTINGS[SETTING].check(rule, "--execution")


def tag(rule: str) -> str:
    """The rule's name as every figure states it: same_close carries its warning."""
    return f"{rule} ({UPPER_BOUND})" if rule == SAME_CLOSE else rule


def held_label(rule: str) -> str:
    """The `horizon` of the IC and quintile rows scored against the return the books earn."""
    return f"held: {tag(rule)}"


@dataclass(frozen=True)
class Bars:
    """Sessions x tickers opens and closes, on the basis of the last session read."""

    open: pd.DataFrame
    close: pd.DataFrame


EMPTY_BARS = Bars(pd.DataFrame(index=pd.DatetimeIndex([])), pd.DataFrame(index=pd.DatetimeIndex([])))


def load_bars(engine: Engine, tickers: list[str], start: dt.date, end: dt.date) -> Bars:
    """The stored opens and closes of `tickers` between two dates, times `cumulative_factors`."""
    if not tickers:
        return EMPTY_BARS
    frame = _read(engine, ["ticker", "date", "open", "close"], prices, "date", start, end, "ticker, date")
    frame = frame[frame["ticker"].isin(set(tickers))]
    if frame.empty:
        return EMPTY_BARS
    close = frame.pivot(index="date", columns="ticker", values="close").astype(float)
    open_ = frame.pivot(index="date", columns="ticker", values="open").astype(float).reindex_like(close)
    basis = close.index[-1].date()
    for t, acts in load_actions(engine, list(close.columns)).items():
        # A day's open and close share its factor: the ex-date's open is already on the new basis.
        factor = cumulative_factors(close.index, acts, basis)
        close[t] = close[t].to_numpy() * factor
        open_[t] = open_[t].to_numpy() * factor
    return Bars(open_, close)


def _held(bars: Bars, rule: str, evenings) -> tuple[np.ndarray, np.ndarray, np.ndarray, pd.Index]:
    """Per evening: (entry position, exit position) in the sessions, the padded price array (two rows of
    NaN past the last session: an exit not yet closed) and the ticker columns."""
    px = bars.close if rule == "next_close" else bars.open
    sessions = np.asarray(px.index.to_numpy(), dtype="datetime64[D]")
    days = np.asarray(pd.to_datetime(evenings).to_numpy(), dtype="datetime64[D]")
    entry = np.searchsorted(sessions, days, side="right")  # T+1: the first session after the evening
    values = px.to_numpy(dtype=float).reshape(len(sessions), len(px.columns))
    padded = np.vstack([values, np.full((2, values.shape[1]), np.nan)])
    return entry, entry + 1, padded, px.columns


def _session_dates(bars: Bars, positions: np.ndarray) -> np.ndarray:
    sessions = np.asarray(bars.close.index.to_numpy(), dtype="datetime64[ns]")
    padded = np.concatenate([sessions, np.full(2, np.datetime64("NaT"), dtype="datetime64[ns]")])
    return padded[positions]


def with_held(rows: pd.DataFrame, rule: str, bars: Bars | None = None) -> pd.DataFrame:
    """The rows frame with `held_return` (what the row's position earns under `rule`; NaN: not held yet
    or no bar) and `held_entry` / `held_exit` (the sessions it is entered and left)."""
    if rule not in EXECUTIONS:
        raise ValueError(f"execution must be one of {EXECUTIONS}, not {rule!r}")
    if rule == SAME_CLOSE:
        return rows.assign(
            held_return=rows["real_next_day"].to_numpy(dtype=float),
            held_entry=rows["run_date"],
            held_exit=rows["next_day_date"],
        )
    if bars is None:
        raise ValueError(f"the {rule} rule needs the stored prices (execution.load_bars)")
    if rows.empty or bars.close.empty:
        nat = pd.Series(pd.NaT, index=rows.index, dtype="datetime64[ns]")
        return rows.assign(held_return=np.nan, held_entry=nat, held_exit=nat)
    entry, exit_, padded, columns = _held(bars, rule, rows["run_date"])
    col = columns.get_indexer(rows["ticker"].astype(str))
    safe = np.maximum(col, 0)
    with np.errstate(invalid="ignore", divide="ignore"):
        ret = padded[exit_, safe] / padded[entry, safe] - 1.0
    return rows.assign(
        held_return=np.where(col >= 0, ret, np.nan),
        held_entry=_session_dates(bars, entry),
        held_exit=_session_dates(bars, exit_),
    )


def benchmark(bars: Bars, rule: str, evenings: list, membership: Membership | None = None) -> pd.Series:
    """The equal-weight universe (every ticker of the bars with both its entry and exit price, and a
    member on the evening) held by `rule` (next_close or next_open) from each evening. Indexed by the
    evenings as given."""
    if rule == SAME_CLOSE or rule not in EXECUTIONS:
        raise ValueError(
            f"the lagged benchmark holds {' or '.join(e for e in EXECUTIONS if e != SAME_CLOSE)}, not {rule!r} "
            "(same_close: rows.benchmark_returns)"
        )
    if not len(evenings) or bars.close.empty:
        return pd.Series(np.nan, index=pd.Index(list(evenings)), dtype=float)
    entry, exit_, padded, _ = _held(bars, rule, evenings)
    with np.errstate(invalid="ignore", divide="ignore"):
        ret = padded[exit_] / padded[entry] - 1.0
    ok = np.isfinite(ret)
    if membership is not None:
        ok &= member_matrix(membership, pd.to_datetime(list(evenings)), bars.close.columns)
    n = ok.sum(axis=1)
    mean = np.where(ok, ret, 0.0).sum(axis=1) / np.maximum(n, 1)
    return pd.Series(np.where(n > 0, mean, np.nan), index=pd.Index(list(evenings)), dtype=float)


def scored_evenings(frame: pd.DataFrame) -> list[dt.date]:
    """The evenings with a held return: the ones the books and the benchmark are scored on."""
    held = frame[np.isfinite(frame["held_return"].to_numpy(dtype=float))]
    return as_dates(sorted(held["run_date"].unique()))


def attach(engine: Engine, rows: Rows, rule: str) -> tuple[pd.DataFrame, pd.Series]:
    """(the rows frame `with_held` under `rule`, the benchmark held by the same rule over its scored
    evenings), from the stored prices. same_close keeps the old figures exactly: the rows' filled-back
    returns and rows.benchmark_returns."""
    frame = rows.rows
    if rule == SAME_CLOSE:
        held = with_held(frame, rule)
        return held, benchmark_returns(engine, rows.universe, scored_evenings(held))
    bars = EMPTY_BARS
    if len(frame):
        start = pd.Timestamp(frame["run_date"].min()).date()
        end = pd.Timestamp(frame["run_date"].max()).date() + dt.timedelta(days=LOOKAHEAD_DAYS)
        bars = load_bars(engine, rows.universe, start, end)
    held = with_held(frame, rule, bars)
    return held, benchmark(bars, rule, scored_evenings(held), rows.membership)
