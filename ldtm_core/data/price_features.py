"""Point-in-time price/volume features for tabular models (ridge, LightGBM): an Alpha158-style library.

One ticker's daily bars (date, open, high, low, close, volume, all on one split/dividend basis) in, one
column per feature out. A feature on date t is a function of the `window` bars ending at t and of nothing
later, so appending bars never changes an earlier row (no look-ahead). Each is a ratio of prices, or of
volumes, from that one window, so it does not depend on which basis the adjustment used either.

Conventions: windows count bars (sessions), not calendar days, and include t; returns are natural logs;
nothing is annualised; std is the sample std (ddof=1). The first `window - 1` rows of a feature are NaN
(warm-up) and `LOOKBACK` is the longest window. A ratio whose denominator is zero (no volume over the
window, a flat 20-bar range) is NaN, never inf.

`FEATURES` is the one definition: `feature_names()`, the table below and `fingerprint()` all read it.
Notation: c, h, l, v are close, high, low, volume; r_t = ln(c_t / c_{t-1}); mean_n, std_n, max_n, min_n
run over the n bars ending at t.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import pandas as pd

from ldtm_core.errors import InputError

# Bump when a definition's code changes but its (name, window, doc) does not: the fingerprint of a stored
# feature set must then change too.
VERSION = 1

RETURN_WINDOWS = (1, 5, 10, 20, 60)
VOLATILITY_WINDOWS = (5, 20, 60)
VOLUME_WINDOWS = (5, 20, 60)
MA_WINDOWS = (5, 10, 20, 60)
RANGE_WINDOW = 20
DRAWDOWN_WINDOW = 60

PRICE_COLUMNS = ("open", "high", "low", "close")
COLUMNS = ("date", *PRICE_COLUMNS, "volume")


class Bars(NamedTuple):
    """Validated bars as float64 frames [bar, ticker]: one column per ticker, its bars from row 0 (oldest
    first), NaN after its last. A feature maps them to a frame of the same shape, column by column."""

    open: pd.DataFrame
    high: pd.DataFrame
    low: pd.DataFrame
    close: pd.DataFrame
    volume: pd.DataFrame


@dataclass(frozen=True)
class Feature:
    """One feature: its column `name`, the `window` of bars it reads (t included), its formula as `doc`,
    and `fn(bars)` -> a frame shaped like the bars, NaN in each column's first `window - 1` rows."""

    name: str
    window: int
    doc: str
    fn: Callable[[Bars], pd.DataFrame]


def _ratio(num: pd.DataFrame, den: pd.DataFrame) -> pd.DataFrame:
    """num / den, NaN where den is not positive: a zero denominator is "undefined", not inf."""
    return num / den.where(den > 0)


def _daily_return(b: Bars) -> pd.DataFrame:
    return np.log(b.close / b.close.shift(1))


def _log_return(k: int) -> Callable[[Bars], pd.DataFrame]:
    return lambda b: np.log(b.close / b.close.shift(k))


def _volatility(n: int) -> Callable[[Bars], pd.DataFrame]:
    # Row 0 has no return, so the first full window of n returns ends at row n: window n + 1 bars.
    return lambda b: _daily_return(b).rolling(n).std(ddof=1)


def _volume_ratio(n: int) -> Callable[[Bars], pd.DataFrame]:
    return lambda b: _ratio(b.volume, b.volume.rolling(n).mean())


def _ma_ratio(n: int) -> Callable[[Bars], pd.DataFrame]:
    return lambda b: b.close / b.close.rolling(n).mean() - 1.0


def _range(b: Bars) -> pd.DataFrame:
    return (b.high - b.low) / b.close


def _range_mean(n: int) -> Callable[[Bars], pd.DataFrame]:
    return lambda b: _range(b).rolling(n).mean()


def _position(n: int) -> Callable[[Bars], pd.DataFrame]:
    def fn(b: Bars) -> pd.DataFrame:
        lo = b.low.rolling(n).min()
        return _ratio(b.close - lo, b.high.rolling(n).max() - lo)

    return fn


def _drawdown(n: int) -> Callable[[Bars], pd.DataFrame]:
    return lambda b: b.close / b.close.rolling(n).max() - 1.0


FEATURES: tuple[Feature, ...] = (
    *(Feature(f"ret_{k}", k + 1, f"ln(c_t / c_{{t-{k}}})", _log_return(k)) for k in RETURN_WINDOWS),
    *(Feature(f"vol_{n}", n + 1, f"std_{n}(r)", _volatility(n)) for n in VOLATILITY_WINDOWS),
    # A plain ratio, not its log: a zero-volume day is then 0, where the log would be -inf.
    *(Feature(f"vratio_{n}", n, f"v_t / mean_{n}(v)", _volume_ratio(n)) for n in VOLUME_WINDOWS),
    *(Feature(f"ma_ratio_{n}", n, f"c_t / mean_{n}(c) - 1", _ma_ratio(n)) for n in MA_WINDOWS),
    Feature("range_1", 1, "(h_t - l_t) / c_t", _range),
    Feature(
        f"range_{RANGE_WINDOW}", RANGE_WINDOW, f"mean_{RANGE_WINDOW}((h - l) / c)", _range_mean(RANGE_WINDOW)
    ),
    Feature(
        f"pos_{RANGE_WINDOW}",
        RANGE_WINDOW,
        f"(c_t - min_{RANGE_WINDOW}(l)) / (max_{RANGE_WINDOW}(h) - min_{RANGE_WINDOW}(l))",
        _position(RANGE_WINDOW),
    ),
    Feature(
        f"dd_{DRAWDOWN_WINDOW}",
        DRAWDOWN_WINDOW,
        f"c_t / max_{DRAWDOWN_WINDOW}(c) - 1",
        _drawdown(DRAWDOWN_WINDOW),
    ),
)

# The most bars any feature reads: from row LOOKBACK - 1 on, every feature is past its warm-up.
LOOKBACK: int = max(f.window for f in FEATURES)


def feature_names() -> tuple[str, ...]:
    """The feature columns, in registry order."""
    return tuple(f.name for f in FEATURES)


# The library as first released: a tabular model stored without its own feature list read these 19.
FIRST_LIBRARY = (
    *(f"ret_{k}" for k in (1, 5, 10, 20, 60)),
    *(f"vol_{n}" for n in (5, 20, 60)),
    *(f"vratio_{n}" for n in (5, 20, 60)),
    *(f"ma_ratio_{n}" for n in (5, 10, 20, 60)),
    "range_1",
    "range_20",
    "pos_20",
    "dd_60",
)


def definitions(names: tuple[str, ...] | list[str] | None = None) -> list[Feature]:
    """The features called `names`, in that order (default: every one); InputError naming any unknown."""
    if names is None:
        return list(FEATURES)
    by_name = {f.name: f for f in FEATURES}
    unknown = [n for n in names if n not in by_name]
    if unknown:
        raise InputError(
            f"price feature(s) {', '.join(map(repr, unknown))} are not in the library (`ldtm features list`)"
        )
    return [by_name[n] for n in names]


def lookback(names: tuple[str, ...] | list[str] | None = None) -> int:
    """The most bars any of the features `names` reads."""
    return max(f.window for f in definitions(names))


def code_for(names: tuple[str, ...] | list[str], source: str | None = None, features=None) -> str:
    """This module's code as the features `names` compute it: its syntax tree without `FEATURES`, `LOOKBACK`,
    the constants the FEATURES entries read and every feature's own function, then the functions of
    `names` alone and their (name, window, doc). Adding a feature (its function, its entry, a window)
    leaves the code of every other list unchanged, so a stored model's fold keys stand.
    `source` and `features` (this file and FEATURES by default) let a test edit the library."""
    import ast
    from pathlib import Path

    features = FEATURES if features is None else features
    tree = ast.parse(source if source is not None else Path(__file__).read_text(encoding="utf-8"))
    by_name = {f.name: f for f in features}
    used = [by_name[n] for n in names]
    own = lambda f: f.fn.__qualname__.split(".")[0]  # noqa: E731 - the top-level function making it
    factories, kept = {own(f) for f in features}, {own(f) for f in used}
    registry = next(
        (n for n in tree.body if isinstance(n, ast.AnnAssign | ast.Assign) and "FEATURES" in _targets(n)),
        None,
    )
    # The windows and other constants the entries read (RETURN_WINDOWS, ...): the entries' own part.
    read = (
        {n.id for n in ast.walk(registry) if isinstance(n, ast.Name) and n.id.isupper()}
        if registry
        else set()
    )
    body = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name in factories - kept:
            continue
        if isinstance(node, ast.AnnAssign | ast.Assign) and _targets(node) & {"FEATURES", "LOOKBACK", *read}:
            continue
        body.append(node)
    tree.body = body
    spec = json.dumps([[f.name, f.window, f.doc] for f in used], separators=(",", ":"))
    return f"{ast.unparse(tree)}\n# features: {spec}\n"


def _targets(node) -> set[str]:
    import ast

    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
    return {t.id for t in targets if isinstance(t, ast.Name)}


def docs_table() -> str:
    """The registry as a Markdown table (name, bars read, formula)."""
    rows = [f"| `{f.name}` | {f.window} | `{f.doc}` |" for f in FEATURES]
    return "\n".join(["| feature | bars | formula |", "|---|---|---|", *rows])


def fingerprint(names: tuple[str, ...] | list[str] | None = None) -> str:
    """sha256 hex of the (name, window, doc) of the features `names` (default: the whole registry) and
    VERSION, as canonical JSON: stored with a feature set or a model, it says which definitions made it."""
    spec = {"version": VERSION, "features": [[f.name, f.window, f.doc] for f in definitions(names)]}
    blob = json.dumps(spec, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(blob.encode("ascii")).hexdigest()


def _day(ts: pd.Timestamp) -> str:
    return ts.date().isoformat() if ts == ts.normalize() else str(ts)


def _require(columns: pd.Index, required: tuple[str, ...], who: str) -> None:
    missing = [c for c in required if c not in columns]
    if missing:
        raise InputError(f"{who}: bars lack column(s) {', '.join(repr(c) for c in missing)}")


def _validate(bars: pd.DataFrame, tickers: pd.Series, order: np.ndarray, first: np.ndarray) -> dict:
    """The value columns as float64 arrays, or InputError naming the ticker, the column and the date of the
    first bad row (in input order). `order` lists the rows ticker by ticker, each in input order, and
    `first[j]` says whether row order[j] is its ticker's first."""

    def fail(bad: np.ndarray, message: Callable[[int], str]) -> None:
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise InputError(f"{tickers.iloc[i]}: {message(i)}")

    try:
        dates = pd.DatetimeIndex(pd.to_datetime(bars["date"], errors="coerce"))
    except (ValueError, TypeError) as e:  # e.g. time zones mixed: no one row to blame
        raise InputError(f"{tickers.iloc[0]}: column 'date' cannot be read as dates ({e})") from None
    fail(dates.isna(), lambda i: f"column 'date' holds {bars['date'].iloc[i]!r} on row {i}, not a date")
    # Consecutive rows of one ticker (in `order`) must move forward in time.
    d = dates.to_numpy()[order]
    back = np.zeros(len(bars), dtype=bool)
    back[order[1:]] = (d[1:] <= d[:-1]) & ~first[1:]
    prev = np.empty(len(bars), dtype=np.int64)
    prev[order[1:]] = order[:-1]
    fail(
        back,
        lambda i: (
            f"column 'date' must strictly increase: {_day(dates[i])} "
            + ("is repeated" if dates[i] == dates[prev[i]] else f"comes after {_day(dates[prev[i]])}")
        ),
    )

    out = {}
    for col in (*PRICE_COLUMNS, "volume"):
        # Text or None becomes NaN here and is then reported as a bad value, like a negative one.
        x = pd.to_numeric(bars[col], errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
        need = "a non-negative number" if col == "volume" else "a positive number"
        ok = np.isfinite(x) & ((x >= 0) if col == "volume" else (x > 0))
        fail(
            ~ok,
            lambda i, col=col, need=need: (
                f"column {col!r} must be {need}, got {bars[col].iloc[i]!r} on {_day(dates[i])}"
            ),
        )
        out[col] = x
    return out


def _features(bars: pd.DataFrame, tickers: pd.Series) -> np.ndarray:
    """[rows, features] for the rows of `bars`, each ticker (label in `tickers`) on its own rows only."""
    codes, uniques = pd.factorize(tickers, use_na_sentinel=False)
    order = np.argsort(codes, kind="stable")
    sorted_codes = codes[order]
    first = np.r_[True, sorted_codes[1:] != sorted_codes[:-1]] if len(order) else np.zeros(0, dtype=bool)
    values = _validate(bars, tickers, order, first)

    # One column per ticker, its bars from row 0 down, NaN below its last bar. Pandas rolls each column
    # on its own and never looks ahead, so a column gives exactly what that ticker alone would, and all
    # tickers go through each pandas call at once.
    starts = np.flatnonzero(first)
    row = np.arange(len(order)) - np.repeat(starts, np.diff(np.r_[starts, len(order)]))
    height = int(row.max()) + 1 if len(order) else 0
    # at[i]: input row i's place in a ticker-major [tickers, height] block, the layout pandas keeps a
    # frame's columns in, so filling and reading back are flat scatters and gathers without copies.
    at = np.empty(len(order), dtype=np.intp)
    at[order] = sorted_codes * height + row
    wide = {}
    for col, x in values.items():
        block = np.full((len(uniques), height), np.nan)
        np.put(block, at, x)
        wide[col] = pd.DataFrame(block.T, copy=False)
    b = Bars(**wide)

    out = np.empty((len(FEATURES), len(bars)))
    for j, f in enumerate(FEATURES):
        out[j] = np.take(f.fn(b).to_numpy(dtype=np.float64).T, at)
    return out.T


def compute(bars: pd.DataFrame, ticker: str = "?") -> pd.DataFrame:
    """Every feature for one ticker's bars (columns date, open, high, low, close, volume; dates strictly
    increasing): a frame with the input's index, its `date` column, then one column per feature.
    `ticker` only names the series in errors."""
    _require(bars.columns, COLUMNS, ticker)
    values = _features(bars, pd.Series(ticker, index=range(len(bars)), dtype=object))
    out = pd.DataFrame(values, index=bars.index, columns=list(feature_names()), copy=False)
    # `.array`, not the Series: positional, so an index with repeated labels cannot misalign the dates.
    out.insert(0, "date", bars["date"].array)
    return out


def compute_panel(bars: pd.DataFrame) -> pd.DataFrame:
    """`compute` for many tickers (a `ticker` column): each ticker on its own rows only, taken in the
    order given (so its dates must strictly increase; rows of tickers may interleave). Returns a frame with
    the input's index and row order: `ticker`, `date`, then one column per feature."""
    _require(bars.columns, ("ticker", *COLUMNS), "panel")
    tickers = bars["ticker"].reset_index(drop=True)
    if tickers.isna().any():
        i = int(np.flatnonzero(tickers.isna().to_numpy())[0])
        raise InputError(f"panel: column 'ticker' is empty on row {i} (date {bars['date'].iloc[i]})")
    values = _features(bars, tickers)
    out = pd.DataFrame(values, index=bars.index, columns=list(feature_names()), copy=False)
    out.insert(0, "date", bars["date"].array)
    out.insert(0, "ticker", bars["ticker"].array)
    return out


# The table is generated, never written twice; `python -OO` strips docstrings, hence the guard.
if __doc__ is not None:
    __doc__ += "\n" + docs_table() + "\n"
