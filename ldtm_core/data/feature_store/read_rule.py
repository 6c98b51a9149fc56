"""The rule every reader of stored features follows: the stored rows are used only while the fingerprint
of the prices they came from equals that of the prices now; otherwise features are recomputed from
prices and the reason is said (a FeatureRead's `reason`, the `ldtm.features` logger).

A reader asks for a model's features by name. The store holds the reference recipe's (its columns); a
registered feature without a column is computed from the same prices beside them (`computed`)."""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from sqlalchemy import Engine, select

from ldtm_core.data.feature_store.bulk_read import load_stored_bulk, stored_arrays
from ldtm_core.data.feature_store.fingerprint import (
    BAR_FIELDS,
    FEATURE_DEFINITION,
    PriceFingerprint,
    current_fingerprint,
)
from ldtm_core.data.features import compute_features
from ldtm_core.data.prices import load_prices
from ldtm_core.data.universe import validate_ticker
from ldtm_core.schema import FEATURE_COLUMNS, feature_sets

log = logging.getLogger("ldtm.features")


@dataclass(frozen=True)
class StoredSet:
    ticker: str
    fingerprint: PriceFingerprint
    definition: str
    price_rows: int
    rows: int
    warmup_rows: int
    first_date: dt.date | None
    last_date: dt.date | None
    built_at: dt.datetime


def stored_sets(engine: Engine, tickers: Sequence[str] | None = None) -> dict[str, StoredSet]:
    stmt = select(feature_sets)
    if tickers is not None:
        stmt = stmt.where(feature_sets.c.ticker.in_([validate_ticker(t) for t in tickers]))
    with engine.connect() as conn:
        rows = conn.execute(stmt).mappings().all()
    return {
        r["ticker"]: StoredSet(
            ticker=r["ticker"],
            fingerprint=PriceFingerprint.from_token(r["fingerprint"]),
            definition=r["definition"],
            price_rows=r["price_rows"],
            rows=r["rows"],
            warmup_rows=r["warmup_rows"],
            first_date=r["first_date"],
            last_date=r["last_date"],
            built_at=r["built_at"],
        )
        for r in rows
    }


def stale_reason(
    stored: StoredSet | None, current: PriceFingerprint, definition: str = FEATURE_DEFINITION
) -> str | None:
    """None when the stored set was computed from exactly these prices by this feature code (`definition`:
    the reference features', or the library's); else why not."""
    if stored is None:
        return "no stored features"
    if stored.definition != definition:
        return f"stored features come from another feature definition ({stored.definition})"
    was = stored.fingerprint
    if was == current:
        return None
    if (was.rows, was.last_date) != (current.rows, current.last_date):
        return (
            f"prices changed since the features were built: {was.rows} rows to {was.last_date}, "
            f"now {current.rows} rows to {current.last_date}"
        )
    if was.corporate_actions != current.corporate_actions:
        return f"corporate actions changed ({was.corporate_actions} -> {current.corporate_actions})"
    if was.gaps != current.gaps:
        return f"the price gaps features restart after changed ({was.gaps or 'none'} -> {current.gaps or 'none'})"
    return f"a stored bar was revised since the features were built (bars hash {was.bars_sha256[:12]} -> {current.bars_sha256[:12]})"


@dataclass
class FeatureRead:
    """The features a reader got and where they came from: `store`, or `recomputed` with the reason."""

    ticker: str
    frame: pd.DataFrame
    source: str
    reason: str = ""
    fingerprint: PriceFingerprint | None = None
    computed: tuple[str, ...] = ()  # with source 'store': the features the store has no column for

    def describe(self) -> str:
        if self.source != "store":
            return f"recomputed ({self.reason})"
        return f"stored, {', '.join(self.computed)} computed from prices" if self.computed else "stored"


def not_stored(names: Sequence[str]) -> tuple[str, ...]:
    """The features of `names` the store has no column for: computed from prices by every reader."""
    return tuple(n for n in names if n not in FEATURE_COLUMNS)


def with_computed(stored: pd.DataFrame, prices: pd.DataFrame, names: Sequence[str]) -> pd.DataFrame:
    """Stored rows (the store's columns) as a frame of `names`: a feature without a column is computed
    from `prices`, the prices the stored rows came from; rows where it has no value yet are dropped, as a
    recomputation would drop them."""
    names = list(names)
    extra = not_stored(names)
    if not extra:
        return stored if names == list(stored.columns) else stored[names]
    computed = compute_features(prices, names=extra)
    return stored.join(computed, how="inner")[names]


def prices_and_features(
    engine: Engine, ticker: str, end: dt.date | None = None, features: Sequence[str] = FEATURE_COLUMNS
) -> tuple[pd.DataFrame, FeatureRead]:
    """One ticker's prices up to `end` and the features `features` (a model's, in input order; default the
    store's columns): stored when the fingerprint of the whole price series matches the stored set's, else
    recomputed from these prices (logged with the reason). A feature the store has no column for is
    computed from these prices either way.

    Features at t use nothing after t, so stored rows up to `end` equal a recomputation on the prices
    up to `end`; the fingerprint is always taken over the whole series.
    """
    ticker = validate_ticker(ticker)
    names = tuple(features)
    whole = load_prices(engine, [ticker])[ticker]  # every price column, as callers had it before
    current = current_fingerprint(engine, ticker, whole)
    prices = whole if end is None else whole[whole["date"] <= end].reset_index(drop=True)
    reason = stale_reason(stored_sets(engine, [ticker]).get(ticker), current)
    if reason is None:
        stored = load_stored_bulk(engine, [ticker], end=end)[ticker]
        frame = with_computed(stored, prices, names)
        return prices, FeatureRead(ticker, frame, "store", "", current, not_stored(names))
    if prices.empty:  # nothing to compute from; the caller reports "no prices"
        empty = pd.DataFrame(columns=list(names), dtype=np.float64)
        return prices, FeatureRead(ticker, empty, "recomputed", "no prices", current)
    log.info("%s: features recomputed from prices: %s", ticker, reason)
    return prices, FeatureRead(ticker, compute_features(prices, names=names), "recomputed", reason, current)


def stored_windows(
    engine: Engine,
    arrays: dict[str, dict],
    run_date: dt.date,
    windows: dict[str, int],
    features: Mapping[str, Sequence[str]] | None = None,
) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """Inference's read: ({ticker: [W, F] feature rows ending at run_date}, {ticker: why not}), F being the
    ticker's model's `features` (default: the store's columns); a feature the store has no column for is
    computed from the loaded bars.

    Inference loads only the recent bars of each ticker (`arrays`, as price_windows.load_price_arrays
    returns them), so it checks the stored rows against exactly those bars instead of hashing twenty
    years per ticker every evening (2 s for 103 tickers on PostgreSQL): the stored set must come from
    this feature code, and every loaded bar must equal the OHLCV stored on its row. That covers all a
    window's values depend on (SMA/returns look back 20 sessions; RSI's weight of a bar 250 sessions
    back is below 1e-8).
    """
    tickers = [t for t in windows if t in arrays]
    if not tickers:
        return {}, {}
    day = np.datetime64(run_date, "D")
    start = min(pd.Timestamp(arrays[t]["date"][0]).date() for t in tickers)
    sets = stored_sets(engine, tickers)
    stored_by_ticker = stored_arrays(engine, tickers, start, run_date)
    empty = (np.empty(0, "datetime64[D]"), np.empty((0, len(FEATURE_COLUMNS))))
    out, why = {}, {}
    for t in tickers:
        a, w, s = arrays[t], windows[t], sets.get(t)
        names = tuple((features or {}).get(t, FEATURE_COLUMNS))
        if s is None or s.definition != FEATURE_DEFINITION:
            why[t] = "no stored features" if s is None else "stored features come from another definition"
            continue
        dates, values = stored_by_ticker.get(t, empty)
        loaded = a["date"] <= day
        bars = np.stack([a[f][loaded] for f in BAR_FIELDS], axis=1)
        if len(dates) != int(loaded.sum()) or not np.array_equal(dates, a["date"][loaded]):
            why[t] = f"stored features do not cover the {int(loaded.sum())} sessions up to {run_date}"
        elif not np.array_equal(values[:, : len(BAR_FIELDS)], bars):
            first = dates[(values[:, : len(BAR_FIELDS)] != bars).any(axis=1)][0]
            why[t] = f"a bar was revised since the features were built (first on {first})"
        elif len(dates) < w:
            why[t] = f"only {len(dates)} stored rows up to {run_date}, the window needs {w}"
        elif names == tuple(FEATURE_COLUMNS):
            out[t] = values[-w:]
        else:
            window = _window_of(names, dates[-w:], values[-w:], {f: a[f][loaded] for f in BAR_FIELDS}, dates)
            if isinstance(window, str):
                why[t] = window
            else:
                out[t] = window
    for t, reason in why.items():
        log.info("%s: features recomputed from prices for %s: %s", t, run_date, reason)
    return out, why


def _window_of(
    names: tuple[str, ...],
    dates: np.ndarray,
    stored: np.ndarray,
    bars: dict[str, np.ndarray],
    all_dates: np.ndarray,
) -> np.ndarray | str:
    """The [W, F] window of `names` from the stored rows of its `dates` and, for the features without a
    column, a computation over the loaded bars (dated `all_dates`); a reason when that has no full window."""
    column = {n: i for i, n in enumerate(FEATURE_COLUMNS)}
    extra = not_stored(names)
    frame = pd.DataFrame({"date": all_dates.astype(object), **bars})
    computed = compute_features(frame, names=extra)
    tail = np.asarray(computed.index[-len(dates) :], dtype="datetime64[D]")
    if len(computed) < len(dates) or not np.array_equal(tail, dates):
        return f"{', '.join(extra)} cannot be computed over the {len(dates)} sessions of the window"
    values = computed.to_numpy(dtype=np.float64)[-len(dates) :]
    return np.stack(
        [stored[:, column[n]] if n in column else values[:, extra.index(n)] for n in names], axis=1
    )
