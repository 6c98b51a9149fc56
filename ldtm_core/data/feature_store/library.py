"""The `price_features` library in the store: each price row's library values beside the five bars they
came from, written by the `features` asset with the fingerprint of the prices (`build_features`), and
read by the recipes whose inputs are the library (`library_values`).

A stored row packs the ticker's bars on that date and the library's values there (NaN in warm-up) as
little-endian float64, in the order of its set's `columns`. A reader checks the bars it loaded against
the stored ones: a feature on date t reads only bars up to t, so equal bars mean equal values, and no
reader hashes a whole series to trust a row.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from sqlalchemy import Connection, Engine, delete, insert, select

from ldtm_core.data import price_features
from ldtm_core.data.feature_store.fingerprint import BAR_FIELDS, PriceFingerprint
from ldtm_core.data.universe import validate_ticker
from ldtm_core.schema import price_feature_rows, price_feature_sets

log = logging.getLogger("ldtm.features")

NAMES = price_features.feature_names()
COLUMNS = (*BAR_FIELDS, *NAMES)
# A stored set is only valid for the library code that wrote it (its fingerprint covers every formula).
LIBRARY_DEFINITION = f"price_features-{price_features.fingerprint()}"
PACKED = np.dtype("<f8")


@dataclass(frozen=True)
class LibrarySet:
    """What one ticker's stored library rows came from (its `price_feature_sets` row)."""

    ticker: str
    fingerprint: PriceFingerprint
    definition: str
    columns: tuple[str, ...]
    rows: int
    first_date: dt.date | None
    last_date: dt.date | None

    @property
    def price_rows(self) -> int:  # every price row is stored, warm-up included
        return self.rows


def library_sets(engine: Engine | Connection, tickers: Sequence[str]) -> dict[str, LibrarySet]:
    stmt = select(price_feature_sets).where(price_feature_sets.c.ticker.in_(list(tickers)))
    if isinstance(engine, Connection):
        rows = engine.execute(stmt).mappings().all()
    else:
        with engine.connect() as conn:
            rows = conn.execute(stmt).mappings().all()
    return {
        r["ticker"]: LibrarySet(
            r["ticker"],
            PriceFingerprint.from_token(r["fingerprint"]),
            r["definition"],
            tuple(r["columns"].split(",")),
            r["rows"],
            r["first_date"],
            r["last_date"],
        )
        for r in rows
    }


def library_rows(prices: pd.DataFrame, ticker: str) -> np.ndarray:
    """[price rows, len(COLUMNS)]: each row's bars and library values, as the store keeps them."""
    bars = prices[["date", *BAR_FIELDS]].reset_index(drop=True)
    values = price_features.compute(bars, ticker)[list(NAMES)].to_numpy(dtype=np.float64)
    return np.column_stack([bars[list(BAR_FIELDS)].to_numpy(dtype=np.float64), values])


def write_sets(
    conn: Connection, writes: list[tuple[str, PriceFingerprint, pd.Series, np.ndarray, bool]]
) -> None:
    """Store (ticker, fingerprint, dates, rows, replace) sets in the caller's transaction: `replace` drops
    the ticker's rows first, otherwise `rows` are appended. The set row always describes the whole set."""
    if not writes:
        return
    replaced = [t for t, _, _, _, replace in writes if replace]
    if replaced:
        conn.execute(delete(price_feature_rows).where(price_feature_rows.c.ticker.in_(replaced)))
    rows = [
        {"ticker": t, "date": d, "packed": r.astype(PACKED).tobytes()}
        for t, _, dates, values, _ in writes
        for d, r in zip(dates, values, strict=True)
    ]
    if rows:
        conn.execute(insert(price_feature_rows), rows)
    tickers = [t for t, *_ in writes]
    conn.execute(delete(price_feature_sets).where(price_feature_sets.c.ticker.in_(tickers)))
    now = dt.datetime.now(dt.UTC)
    conn.execute(
        insert(price_feature_sets),
        [
            {
                "ticker": t,
                "fingerprint": fp.token,
                "definition": LIBRARY_DEFINITION,
                "columns": ",".join(COLUMNS),
                "rows": fp.rows,
                "first_date": fp.first_date,
                "last_date": fp.last_date,
                "built_at": now,
            }
            for t, fp, *_ in writes
        ],
    )


def remove_set(conn: Connection, ticker: str) -> None:
    conn.execute(delete(price_feature_rows).where(price_feature_rows.c.ticker == ticker))
    conn.execute(delete(price_feature_sets).where(price_feature_sets.c.ticker == ticker))


def stored_rows(
    engine: Engine, tickers: Sequence[str], start: dt.date | None = None, end: dt.date | None = None
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """{ticker: (dates datetime64[D], rows [N, len(COLUMNS)])} of the stored rows within [start, end]."""
    stmt = select(price_feature_rows).where(
        price_feature_rows.c.ticker.in_([validate_ticker(t) for t in tickers])
    )
    if start is not None:
        stmt = stmt.where(price_feature_rows.c.date >= start)
    if end is not None:
        stmt = stmt.where(price_feature_rows.c.date <= end)
    with engine.connect() as conn:
        rows = conn.execute(stmt.order_by(price_feature_rows.c.ticker, price_feature_rows.c.date)).all()
    out: dict[str, tuple[list, list]] = {}
    for t, d, packed in rows:
        dates, values = out.setdefault(t, ([], []))
        dates.append(d)
        values.append(bytes(packed))
    return {
        t: (
            np.array(dates, dtype="datetime64[D]"),
            np.frombuffer(b"".join(values), dtype=PACKED).reshape(len(values), -1).astype(np.float64),
        )
        for t, (dates, values) in out.items()
    }


def _unusable(s: LibrarySet | None, stored, days: np.ndarray, bars: np.ndarray) -> str | None:
    """Why a block of bars (one ticker's `days`) cannot read its stored rows; None when it can."""
    if s is None:
        return "no stored price features"
    if s.definition != LIBRARY_DEFINITION or s.columns != COLUMNS:
        return f"stored price features come from another definition ({s.definition})"
    if stored is None or len(stored[0]) != len(days) or not np.array_equal(stored[0], days):
        return f"stored price features do not cover the {len(days)} sessions {days[0]} to {days[-1]}"
    same = stored[1][:, : len(BAR_FIELDS)] == bars
    if not same.all():
        first = days[~same.all(axis=1)][0]
        return f"a bar was revised since the price features were built (first on {first})"
    return None


def library_values(engine: Engine, bars: pd.DataFrame) -> tuple[np.ndarray, dict[str, str]]:
    """The library's values for a panel of bars (ticker, date, open, high, low, close, volume; each
    ticker's rows in date order), row for row, and {ticker: why they were computed from the bars}.

    A ticker's stored rows are read when its set comes from this library's definition, a stored row
    exists on each of its dates and every bar equals the stored one. A block that starts at the set's
    first row (training, backtests, decay: the whole series) then reads exactly what a recomputation
    gives. One that starts later (the nightly predict's recent bars) reads the whole series' values:
    its rows within the library's LOOKBACK of its start read NaN, as a recomputation over the block
    would, and every later row reads the same window of bars a recomputation reads."""
    out = np.full((len(bars), len(NAMES)), np.nan)
    if bars.empty:
        return out, {}
    tickers = bars["ticker"].to_numpy(dtype=str)
    days = pd.to_datetime(bars["date"]).to_numpy().astype("datetime64[D]")
    ohlcv = bars[list(BAR_FIELDS)].to_numpy(dtype=np.float64)
    names = sorted(set(tickers))
    sets = library_sets(engine, names)
    stored = stored_rows(engine, names, days.min().astype(object), days.max().astype(object))
    why, computed = {}, []
    for t in names:
        at = np.flatnonzero(tickers == t)
        s = sets.get(t)
        reason = _unusable(s, stored.get(t), days[at], ohlcv[at])
        if reason:
            why[t] = reason
            computed.append(at)
            continue
        values = stored[t][1][:, len(BAR_FIELDS) :].copy()
        if days[at[0]] != np.datetime64(s.first_date, "D"):
            values[: price_features.LOOKBACK - 1] = np.nan
        out[at] = values
    if computed:
        at = np.concatenate(computed)
        out[at] = price_features.compute_panel(bars.iloc[at])[list(NAMES)].to_numpy(dtype=np.float64)
    for t, reason in why.items():
        log.info("%s: price features computed from prices: %s", t, reason)
    return out, why
