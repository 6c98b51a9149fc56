"""Price rows checked before anything is stored (SPEC §2): one function, every problem named.

`validate_prices` takes raw rows (strings or numbers, canonical column names) from any source and returns
the clean long frame, or raises one InputError naming the source, the line/row, its date and each problem.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

import numpy as np
import pandas as pd

from ldtm_core.data.calendar import closed_reason, cover, session_array
from ldtm_core.data.universe import validate_ticker
from ldtm_core.errors import InputError

VALUE_COLUMNS = ["open", "high", "low", "close", "adj_close", "volume"]
PRICE_FIELDS = ["open", "high", "low", "close"]
REQUIRED_COLUMNS = ["date", *PRICE_FIELDS, "volume"]
FRAME_COLUMNS = ["ticker", "date", *VALUE_COLUMNS]
# Header spellings accepted (compared lower-case with spaces, '_' and '-' removed): Yahoo's
# `Adj Close`, `adj_close`, `AdjClose` all mean the same column.
_HEADER_ALIASES = {
    "date": "date",
    "open": "open",
    "high": "high",
    "low": "low",
    "close": "close",
    "adjclose": "adj_close",
    "volume": "volume",
    "ticker": "ticker",
    "symbol": "ticker",
}
_ISO_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}(?:[ T].*)?$")
MAX_REPORTED_ROWS = 5
# Sane bounds: beyond them a value is a typo or a corrupt cell, never a price. BRK.A trades near 1e6, and
# the busiest tickers trade ~1e10 shares a day. 1e15 is exact in float64 and far inside int64, so a volume
# can never wrap around when it is stored as BIGINT.
MAX_PRICE = 1e9
MAX_VOLUME = 1e15
_COMMA_DECIMAL = re.compile(r"^[+-]?\d+,\d+$")


def canonical_header(name: object) -> str:
    key = re.sub(r"[\s_\-]+", "", str(name).strip().lower())
    return _HEADER_ALIASES.get(key, str(name).strip())


def _fmt(value) -> str:
    if isinstance(value, str):
        return repr(value if len(value) <= 30 else value[:30] + "...")
    if isinstance(value, (float, np.floating)):
        f = float(value)
        return str(int(f)) if f.is_integer() and abs(f) < 1e15 else repr(f)
    return str(value)


def _string_cells(raw: pd.Series) -> pd.Series:
    """True where the cell holds a string (vectorised for the common all-string and no-string columns)."""
    kind = pd.api.types.infer_dtype(raw, skipna=True)
    if kind in ("string", "empty"):
        return raw.notna()
    if kind != "mixed" and kind != "mixed-integer":
        return pd.Series(False, index=raw.index)
    return raw.map(lambda v: isinstance(v, str)).astype(bool)


def _date_objects(values: pd.Series) -> pd.Series:
    """datetime.date / Timestamp objects to wall-clock midnight datetime64 (NaT where not a date)."""
    try:
        parsed = pd.to_datetime(values, errors="coerce")
        if getattr(parsed.dt, "tz", None) is not None:
            parsed = parsed.dt.tz_localize(None)
        return parsed.dt.normalize().astype("datetime64[ns]")
    except (TypeError, ValueError):  # mixed time zones or odd objects: one at a time

        def one(v):
            try:
                ts = pd.Timestamp(v)
                return pd.Timestamp(ts.year, ts.month, ts.day)
            except (TypeError, ValueError):
                return pd.NaT

        return values.map(one).astype("datetime64[ns]")


def _parse_dates(raw: pd.Series) -> pd.Series:
    """datetime64 (midnight) per row, NaT where missing or unparsable. Accepts ISO dates, ISO
    timestamps (the date as written, so `2024-01-05 00:00:00-05:00` is 5 January) and native
    date/datetime columns from Parquet."""
    if pd.api.types.is_datetime64_any_dtype(raw.dtype):
        s = raw
        if getattr(s.dt, "tz", None) is not None:
            s = s.dt.tz_localize(None)  # the exchange-local wall date, not the UTC one
        return s.dt.normalize().astype("datetime64[ns]")
    out = pd.Series(pd.NaT, index=raw.index, dtype="datetime64[ns]")
    is_str = _string_cells(raw)
    if is_str.any():
        text = raw[is_str].astype(str).str.strip()
        iso = text.str.match(_ISO_DATE).astype(bool)
        out[iso.index[iso]] = pd.to_datetime(text[iso].str[:10], format="%Y-%m-%d", errors="coerce")
    other = raw.notna() & ~is_str
    if other.any():  # datetime.date / Timestamp objects (Parquet date32, object columns)
        out[other] = _date_objects(raw[other])
    return out


def _to_number(raw: pd.Series) -> pd.Series:
    if pd.api.types.is_numeric_dtype(raw.dtype) and not pd.api.types.is_bool_dtype(raw.dtype):
        return raw.astype("float64")
    is_str = _string_cells(raw)
    text = raw.astype(object).copy()
    text[is_str] = raw[is_str].astype(str).str.strip()
    return pd.to_numeric(text, errors="coerce").astype("float64")


def _is_missing(raw: pd.Series) -> pd.Series:
    missing = raw.isna()
    is_str = _string_cells(raw)
    if is_str.any():
        missing |= (raw[is_str].astype(str).str.strip() == "").reindex(raw.index, fill_value=False)
    return missing


def _delimiter_hint(raw: pd.DataFrame) -> str:
    """Why the header was not split into columns, when the file used another delimiter."""
    header = " ".join(str(c) for c in raw.columns)
    for sep, name in ((";", "semicolon"), ("\t", "tab"), ("|", "pipe")):
        if sep in header:
            return (
                f": this looks like a {name}-delimited file; save it as comma-separated with '.' as the "
                "decimal point (e.g. 'Date,Open,High,Low,Close,Adj Close,Volume' and 185.64, not 185,64)"
            )
    return ""


def _decimal_hint(value) -> str:
    if isinstance(value, str) and _COMMA_DECIMAL.match(value.strip()):
        return " (a decimal comma? use '.' as the decimal point)"
    return ""


def validate_prices(
    raw: pd.DataFrame,
    where: str,
    *,
    lines: Sequence[int] | np.ndarray | None = None,
    unit: str = "row",
    default_ticker: str | None = None,
    universe: Iterable[str] | None = None,
    allow_new: bool = False,
    row_problems: dict[int, list[str]] | None = None,
) -> pd.DataFrame:
    """Check a frame of raw price rows and return the clean long frame (FRAME_COLUMNS, sorted).

    `raw` has canonical column names (date, open, ..., optionally ticker/adj_close); values may be
    strings. `lines` numbers the rows as the source does (CSV line numbers); `where` names the source.
    Every problem is collected, and the first few are reported in one InputError naming the source,
    the line/row, its date and what is wrong. `row_problems` adds problems the reader found (by row
    position), such as a last line without a terminator.
    """
    missing = [c for c in REQUIRED_COLUMNS if c not in raw.columns]
    if "ticker" not in raw.columns and default_ticker is None:
        missing.append("ticker")
    if missing:
        found = ", ".join(str(c) for c in raw.columns) or "none"
        raise InputError(
            f"{where}: missing column(s) {', '.join(missing)} (found: {found}){_delimiter_hint(raw)}"
        )
    if raw.empty:
        raise InputError(f"{where}: no data rows (empty or truncated file)")
    raw = raw.reset_index(drop=True)
    n = len(raw)
    line_no = np.asarray(lines if lines is not None else np.arange(1, n + 1))
    problems: dict[int, list[str]] = {i: list(msgs) for i, msgs in (row_problems or {}).items()}

    def flag(mask: pd.Series | np.ndarray, message) -> None:
        for i in np.flatnonzero(np.asarray(mask, dtype=bool)):
            problems.setdefault(int(i), []).append(message(i) if callable(message) else message)

    # Dates.
    dates = _parse_dates(raw["date"])
    date_missing = _is_missing(raw["date"])
    flag(date_missing, "missing date")
    flag(
        dates.isna() & ~date_missing,
        lambda i: f"unparsable date {_fmt(raw['date'].iat[i])} (expected YYYY-MM-DD)",
    )

    # Only exchange sessions: a weekend or holiday row would sit inside every training window after it.
    day = dates.to_numpy().astype("datetime64[D]")
    cover(dates.min())  # the calendar reaches back to the oldest offered date: never refused for its range
    sessions = session_array()
    pos = np.minimum(np.searchsorted(sessions, day), len(sessions) - 1)
    off_calendar = dates.notna().to_numpy() & (sessions[pos] != day)
    flag(off_calendar, lambda i: closed_reason(dates.iat[i]))

    # Tickers.
    if "ticker" in raw.columns:
        tick_raw = raw["ticker"]
        # Validate each distinct value once (a long file repeats a handful of tickers many times).
        canon: dict[object, str | None] = {}
        errors: dict[object, str] = {}
        for v in tick_raw.dropna().unique():
            if isinstance(v, str) and not v.strip():
                continue
            try:
                canon[v] = validate_ticker(v)
            except InputError as exc:
                errors[v] = str(exc)
        tickers = tick_raw.map(canon).astype(object)
        tickers = tickers.where(tickers.notna(), None)
        flag(_is_missing(tick_raw), "missing ticker")
        bad_tick = tick_raw.isin(list(errors))
        flag(bad_tick, lambda i: errors[tick_raw.iat[i]])
    else:
        tickers = pd.Series([default_ticker] * n, dtype=object)
    if universe is not None and not allow_new:
        known = set(universe)
        outside = tickers.notna() & ~tickers.isin(known)
        # One report per unknown ticker (at its first row), not one per row.
        first = outside & ~tickers.where(outside).duplicated()
        flag(
            first, lambda i: f"ticker {tickers.iat[i]} is not in the universe (pass --allow-new to accept it)"
        )

    # Numbers.
    values: dict[str, pd.Series] = {}
    for col in [*PRICE_FIELDS, "volume", "adj_close"]:
        if col not in raw.columns:
            values[col] = pd.Series(np.nan, index=raw.index)
            continue
        r = raw[col]
        v = _to_number(r)
        miss = _is_missing(r)
        if col != "adj_close":
            flag(miss, f"missing {col} (NaN, empty or incomplete row)")
        flag(
            v.isna() & ~miss,
            lambda i, r=r, col=col: f"{col} {_fmt(r.iat[i])} is not a number{_decimal_hint(r.iat[i])}",
        )
        flag(np.isinf(v), f"{col} is infinite")
        limit = MAX_VOLUME if col == "volume" else MAX_PRICE
        flag(
            np.isfinite(v) & (v > limit),
            lambda i, v=v, col=col, limit=limit: f"{col} {_fmt(v.iat[i])} is out of range (above {limit:g})",
        )
        if col == "volume":
            flag(v < 0, lambda i, v=v: f"volume {_fmt(v.iat[i])} is negative")
            flag(
                (v >= 0) & np.isfinite(v) & (v != np.round(v)),
                lambda i, v=v: f"volume {_fmt(v.iat[i])} is not a whole number",
            )
        else:
            flag(np.isfinite(v) & (v <= 0), lambda i, v=v, col=col: f"{col} {_fmt(v.iat[i])} is not positive")
        values[col] = v

    o, h, lo, c = (values[k] for k in PRICE_FIELDS)
    ok_prices = pd.concat([o, h, lo, c], axis=1).gt(0).all(axis=1) & np.isfinite(
        pd.concat([o, h, lo, c], axis=1)
    ).all(axis=1)
    flag(ok_prices & (h < lo), lambda i: f"high {_fmt(h.iat[i])} < low {_fmt(lo.iat[i])}")
    range_ok = ok_prices & (h >= lo)
    for name, s in (("open", o), ("close", c)):
        flag(
            range_ok & ((s < lo) | (s > h)),
            lambda i, s=s, name=name: (
                f"{name} {_fmt(s.iat[i])} outside [low {_fmt(lo.iat[i])}, high {_fmt(h.iat[i])}]"
            ),
        )

    # Duplicate dates per ticker (only among rows whose key parsed).
    key_ok = dates.notna() & tickers.notna()
    keys = pd.DataFrame({"t": tickers, "d": dates})[key_ok]
    dup = keys.duplicated(keep="first")
    if dup.any():
        first_line = keys[~keys.duplicated(keep="first")].reset_index().set_index(["t", "d"])["index"]
        for i in dup.index[dup]:
            j = first_line.loc[(keys.at[i, "t"], keys.at[i, "d"])]
            problems.setdefault(int(i), []).append(
                f"duplicate date for {keys.at[i, 't']} (also at {unit} {line_no[j]})"
            )

    bad = sorted(problems)
    if bad:
        parts = []
        for i in bad[:MAX_REPORTED_ROWS]:
            when = f" ({dates.iat[i].date()})" if pd.notna(dates.iat[i]) else ""
            parts.append(f"{unit} {line_no[i]}{when}: {', '.join(problems[i])}")
        more = (
            f"; and {len(bad) - MAX_REPORTED_ROWS} more bad {unit}s" if len(bad) > MAX_REPORTED_ROWS else ""
        )
        raise InputError(f"{where}: {len(bad)} bad {unit}(s): " + "; ".join(parts) + more)

    out = pd.DataFrame(
        {
            "ticker": tickers.astype(str).to_numpy(),
            "date": dates.to_numpy(),
            "open": o.to_numpy(),
            "high": h.to_numpy(),
            "low": lo.to_numpy(),
            "close": c.to_numpy(),
            "adj_close": values["adj_close"].to_numpy(),
            "volume": values["volume"].round().astype("int64").to_numpy(),
        }
    )
    return out.sort_values(["ticker", "date"], kind="stable").reset_index(drop=True)
