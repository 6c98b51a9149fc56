"""Signal performance, part 1: which rows, and their predicted and realised returns (SPEC §15).

The board's rule (accountability.leaderboard, the views of migrations 0017/0021/0024): one row per
(ticker, evening), the first one recorded among the non-shadow rows, i.e. what was published; then
in-sample replays and ungated evenings (a candidate predicted) are dropped unless asked for, and the mode
(live / replay) is chosen. `shadow=True` is a what-if: on evenings a shadow model predicted, its row takes
the published row's place (never what was published; accountability.shadow decides on it).

Returns, per horizon h: predicted = `{h}_pred / run_date_close - 1`; realised = `{h}_actual /
run_date_close - 1`, where the stored actual is the one fillback wrote, already on the prediction's own
basis (corporate_actions.basis_factor), so a split between run date and target is never a -90 % day.
The benchmark's returns come from the same basis rule through `load_prices(adjusted=True)`.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

import numpy as np
import pandas as pd
from sqlalchemy import Engine, select

from ldtm_core.accountability.fillback import HORIZONS
from ldtm_core.accountability.leaderboard import MODES
from ldtm_core.accountability.registry import SHADOW
from ldtm_core.data.prices import load_prices
from ldtm_core.errors import InputError
from ldtm_core.schema import snapshots

# Sessions each horizon spans (next Monday: 1 to 5): the HAC lag of an overlapping series is h - 1.
HORIZON_SESSIONS = {"next_day": 1, "next_monday": 5, "one_month": 21}


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


def _columns():
    s = snapshots.c
    cols = [s.id, s.ticker, s.run_date, s.mode, s.in_sample, s.model_status, s.model_version]
    cols += [s.direction_pred, s.run_date_close]
    for h in HORIZONS:
        cols += [s[f"{h}_date"], s[f"{h}_pred"], s[f"{h}_actual"]]
    return cols


def load_rows(engine: Engine, choice: RowChoice = PRODUCTION) -> Rows:
    """The rows `choice` selects, with `pred_{h}` / `real_{h}` returns (real NaN until filled).

    One query over the date range; the first-row rule and the flags are applied here in the same order
    as the views (first non-shadow row, then the filters), so a later row of an evening never stands in
    for a dropped first row."""
    s = snapshots.c
    stmt = select(*_columns())
    if choice.start is not None:
        stmt = stmt.where(s.run_date >= choice.start)
    if choice.end is not None:
        stmt = stmt.where(s.run_date <= choice.end)
    with engine.connect() as conn:
        raw = pd.DataFrame(conn.execute(stmt.order_by(s.id)).all(), columns=[c.name for c in _columns()])
    universe = sorted(raw["ticker"].unique()) if len(raw) else []
    shadow_rows = raw[raw["model_status"] == SHADOW]
    first = raw[raw["model_status"] != SHADOW].drop_duplicates(["ticker", "run_date"], keep="first")
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
    dropped = first.assign(reason=reason)[~keep][["ticker", "run_date", "reason"]]
    dropped["run_date"] = pd.to_datetime(dropped["run_date"]).dt.date
    rows = first[keep]
    if choice.shadow and len(shadow_rows):
        shadow_first = shadow_rows.drop_duplicates(["ticker", "run_date"], keep="first")
        if choice.mode != "all":
            shadow_first = shadow_first[shadow_first["mode"] == choice.mode]
        if not choice.include_in_sample:
            shadow_first = shadow_first[~shadow_first["in_sample"].astype(bool)]
        rows = pd.concat([shadow_first, rows]).drop_duplicates(["ticker", "run_date"], keep="first")
    return Rows(with_returns(rows), universe, *hidden, dropped.reset_index(drop=True))


def with_returns(rows: pd.DataFrame) -> pd.DataFrame:
    """Typed columns and the returns of every horizon (a pure function: tests feed it frames)."""
    out = rows.sort_values(["run_date", "ticker"]).reset_index(drop=True).copy()
    for c in ["run_date"] + [f"{h}_date" for h in HORIZONS]:
        out[c] = pd.to_datetime(out[c]).dt.date
    out["in_sample"] = out["in_sample"].astype(bool)
    close = out["run_date_close"].to_numpy(dtype=float)
    for h in HORIZONS:
        out[f"pred_{h}"] = out[f"{h}_pred"].to_numpy(dtype=float) / close - 1.0
        out[f"real_{h}"] = (
            pd.to_numeric(out[f"{h}_actual"], errors="coerce").to_numpy(dtype=float) / close - 1.0
        )
    return out


def benchmark_returns(engine: Engine, tickers: list[str], evenings: list[dt.date]) -> pd.Series:
    """The equal-weight universe's return from each evening's close to the next session's close.

    Every ticker of `tickers` with a bar on both sessions counts that evening (the closes on one basis:
    `load_prices(adjusted=True)` divides out splits and dividends exactly as fillback's basis factor).
    The next session is the next date any of them has a bar."""
    if not tickers or not evenings:
        return pd.Series(dtype=float)
    start, end = min(evenings), max(evenings) + dt.timedelta(days=10)
    frames = load_prices(engine, tickers, start, end, adjusted=True)
    closes = close_matrix(frames)
    return equal_weight_next(closes).reindex(pd.Index(evenings)).astype(float)


def close_matrix(frames: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """{ticker: price frame} -> dates x tickers closes."""
    parts = {t: f.set_index("date")["close"] for t, f in frames.items() if len(f)}
    if not parts:
        return pd.DataFrame()
    return pd.DataFrame(parts).sort_index()


def equal_weight_next(closes: pd.DataFrame) -> pd.Series:
    """Mean over tickers of close(next date) / close(date) - 1, per date (NaN where no ticker has both)."""
    if closes.empty:
        return pd.Series(dtype=float)
    values = closes.to_numpy(dtype=float)
    nxt = np.vstack([values[1:], np.full((1, values.shape[1]), np.nan)])
    with np.errstate(invalid="ignore", divide="ignore"):
        ret = nxt / values - 1.0
    ok = np.isfinite(ret)
    n = ok.sum(axis=1)
    total = np.where(ok, ret, 0.0).sum(axis=1)
    return pd.Series(np.where(n > 0, total / np.maximum(n, 1), np.nan), index=closes.index)
