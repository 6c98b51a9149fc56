"""Reading the `prices` table: one ticker, many tickers in one query, and the per-ticker summary."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from sqlalchemy import Engine, func, select

from ldtm_core.data.calendar import cover
from ldtm_core.data.universe import validate_ticker
from ldtm_core.db import ticker_rows
from ldtm_core.schema import prices

PRICE_COLUMNS = ["ticker", "date", "open", "high", "low", "close", "adj_close", "volume"]


def _frame(rows) -> pd.DataFrame:
    df = pd.DataFrame(rows, columns=PRICE_COLUMNS)
    if not df.empty:
        df["date"] = pd.to_datetime(df["date"]).dt.date
    return df


def load_prices(
    engine: Engine,
    tickers: Sequence[str],
    start: dt.date | None = None,
    end: dt.date | None = None,
    *,
    adjusted: bool = True,
) -> dict[str, pd.DataFrame]:
    """Prices of every ticker in `tickers`, fetched with one query, as {ticker: frame sorted by date}.

    `adjusted` (default): each frame on the basis of its last date, through the recorded corporate
    actions (ldtm_core.data.corporate_actions); `adjusted=False`: the bars as stored."""
    cols = [prices.c[c] for c in PRICE_COLUMNS]
    tickers = [validate_ticker(t) for t in tickers]
    stmt = select(*cols).where(prices.c.ticker.in_(tickers))
    if start is not None:
        stmt = stmt.where(prices.c.date >= start)
    if end is not None:
        stmt = stmt.where(prices.c.date <= end)
    stmt = stmt.order_by(prices.c.ticker, prices.c.date)
    with engine.connect() as conn:
        df = _frame(conn.execute(stmt).all())
    if not df.empty:
        cover(df["date"].min())  # stored history older than the calendar's default start
    out = {t: g.drop(columns="ticker").reset_index(drop=True) for t, g in df.groupby("ticker", sort=False)}
    if adjusted and out:
        from ldtm_core.data.corporate_actions import adjust_frame, load_actions

        actions = load_actions(engine, list(out))
        out = {t: adjust_frame(f, actions.get(t, [])) for t, f in out.items()}
    return {t: out.get(t, _frame([]).drop(columns="ticker")) for t in tickers}


def load_ticker_prices(engine: Engine, ticker: str, end: dt.date | None = None) -> pd.DataFrame:
    return load_prices(engine, [ticker], end=end)[ticker]


def price_summary(engine: Engine) -> pd.DataFrame:
    """Rows and first/last date per ticker."""
    stmt = (
        select(
            prices.c.ticker,
            func.count().label("rows"),
            func.min(prices.c.date).label("first_date"),
            func.max(prices.c.date).label("last_date"),
        )
        .group_by(prices.c.ticker)
        .order_by(prices.c.ticker)
    )
    with engine.connect() as conn:
        return pd.DataFrame(conn.execute(stmt).all(), columns=["ticker", "rows", "first_date", "last_date"])


def _date_bound(engine: Engine, agg, tickers: Sequence[str] | None) -> dt.date | None:
    stmt = select(agg(prices.c.date))
    if tickers:
        # Per ticker one probe of the (ticker, date) key, then the bound of those: aggregating the
        # tickers' rows read every bar ever stored (predict asks this every evening).
        wanted = ticker_rows(engine, sorted(set(tickers)))
        per = select(agg(prices.c.date)).where(prices.c.ticker == wanted.c.ticker).correlate(wanted)
        bounds = select(per.scalar_subquery().label("day")).select_from(wanted).subquery()
        stmt = select(agg(bounds.c.day))
    with engine.connect() as conn:
        value = conn.execute(stmt).scalar()
    return pd.Timestamp(value).date() if value is not None else None


def latest_price_date(engine: Engine, tickers: Sequence[str] | None = None) -> dt.date | None:
    return _date_bound(engine, func.max, tickers)


def earliest_price_date(engine: Engine, tickers: Sequence[str] | None = None) -> dt.date | None:
    return _date_bound(engine, func.min, tickers)


@dataclass
class PriceQuality:
    """Data-quality findings over stored prices: broken bars and sessions missing against XNYS."""

    rows_checked: int = 0
    bad_bars: dict[str, list[str]] = field(default_factory=dict)  # ticker -> first bad dates
    missing_sessions: dict[str, list[str]] = field(default_factory=dict)  # ticker -> all missing dates

    @property
    def ohlc_ok(self) -> bool:
        return not self.bad_bars

    @property
    def sessions_ok(self) -> bool:
        return not self.missing_sessions


def quality_report(engine: Engine, tickers: Sequence[str], examples: int = 5) -> PriceQuality:
    """OHLC consistency (low <= open, close <= high, low > 0, finite) and, per ticker, every XNYS session
    between its first and last row that has no price. Ingest refuses such rows; this guards against
    data written by other means."""
    from ldtm_core.data.calendar import sessions_between

    report = PriceQuality()
    for ticker, f in load_prices(engine, tickers).items():
        if f.empty:
            continue
        report.rows_checked += len(f)
        o, h, lo, c = (f[k].to_numpy(dtype=np.float64) for k in ("open", "high", "low", "close"))
        broken = (lo > np.minimum(o, c)) | (h < np.maximum(o, c)) | (lo <= 0) | ~np.isfinite(o + h + lo + c)
        if broken.any():
            report.bad_bars[ticker] = [str(d) for d in f["date"][broken].head(examples)]
        gap = sorted(set(sessions_between(f["date"].iloc[0], f["date"].iloc[-1])) - set(f["date"]))
        if gap:
            report.missing_sessions[ticker] = [str(d) for d in gap]
    return report
