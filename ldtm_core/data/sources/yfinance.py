"""Yahoo Finance through `yfinance` (optional extra: pip install 'ldtm[yfinance]'), imported lazily.

One `yf.download(tickers, group_by="column")` call per batch: its frame has MultiIndex columns
(Price, Ticker), a tz-naive `Date` index spanning the union of every ticker's dates, and all-NaN
columns for a ticker it could not get. yfinance does not raise for such a ticker: it logs
`['XYZ']: <reason>` on the `yfinance` logger, which is captured here to name the reason.

`auto_adjust=False` (the default here) stores raw OHLC with Yahoo's `Adj Close` as adj_close;
`auto_adjust=True` stores back-adjusted OHLC (no adj_close). Environment: LDTM_YFINANCE_AUTO_ADJUST,
LDTM_YFINANCE_TIMEOUT (seconds per HTTP request), LDTM_YFINANCE_BATCH, LDTM_SOURCE_ATTEMPTS.
"""

from __future__ import annotations

import ast
import datetime as dt
import logging
import re
import time
from collections.abc import Callable, Sequence
from contextlib import contextmanager

import numpy as np
import pandas as pd

from ldtm_core.config import env_flag, setting_float, setting_int
from ldtm_core.data.corporate_actions import Action, dividend_factor, split_factor
from ldtm_core.data.sources.base import PriceSource, SourceAnswer, first_line
from ldtm_core.errors import InputError

YF_COLUMNS = {
    "Open": "open",
    "High": "high",
    "Low": "low",
    "Close": "close",
    "Adj Close": "adj_close",
    "Volume": "volume",
}
_ERROR_LINE = re.compile(r"^\s*(\[.*?\]):\s*(.*)$", re.S)
_TRANSIENT = re.compile(
    r"timed? ?out|timeout|rate.?limit|too many requests|http error 5\d\d|\b5\d\d\b server|connection|curl: \(\d+\)",
    re.I,
)


def _flag(name: str, default: bool) -> bool:
    return env_flag(name, default)


class _Captured(logging.Handler):
    """Collects `['T1', 'T2']: reason` lines that yfinance logs for tickers it could not download."""

    def __init__(self):
        super().__init__(logging.ERROR)
        self.reasons: dict[str, str] = {}

    def emit(self, record: logging.LogRecord) -> None:
        match = _ERROR_LINE.match(record.getMessage())
        if not match:
            return
        try:
            symbols = ast.literal_eval(match.group(1))
        except (ValueError, SyntaxError):
            return
        for symbol in symbols if isinstance(symbols, list) else []:
            self.reasons[str(symbol).upper()] = first_line(match.group(2))


@contextmanager
def _capture_yfinance_errors():
    handler = _Captured()
    logger = logging.getLogger("yfinance")
    logger.addHandler(handler)
    try:
        yield handler.reasons
    finally:
        logger.removeHandler(handler)


def classify(reason: str) -> tuple[str, bool]:
    """(named reason, transient?) for one of yfinance's per-ticker error messages."""
    if _TRANSIENT.search(reason):
        return f"HTTP/network error: {reason}", True
    if "delisted" in reason.lower() or "no timezone" in reason.lower():
        return f"delisted or unknown symbol: {reason}", False
    if "404" in reason or "not found" in reason.lower() or "invalid" in reason.lower():
        return f"unknown symbol: {reason}", False
    return f"yfinance error: {reason}", False


def frames_from_download(
    data: pd.DataFrame | None,
    tickers: Sequence[str],
    errors: dict[str, str],
    start: dt.date,
    end: dt.date,
    events: bool = False,
) -> SourceAnswer:
    """Split one `yf.download(..., group_by="column")` frame into raw per-ticker frames; name the misses.

    `events`: the download had actions=True on raw closes (auto_adjust=False); its 'Stock Splits' and
    'Dividends' columns become corporate actions (style 1)."""
    answer = SourceAnswer()
    have = set()
    if data is not None and not data.empty and isinstance(data.columns, pd.MultiIndex):
        have = set(data.columns.get_level_values("Ticker"))
    for ticker in tickers:
        frame = None
        if ticker in have:
            sub = data.xs(ticker, axis=1, level="Ticker")
            if events:
                answer.actions.extend(_events(ticker, sub))
            cols = [c for c in YF_COLUMNS if c in sub.columns]
            sub = sub[cols].rename(columns=YF_COLUMNS)
            # The frame spans every ticker's dates: rows this ticker has nothing in are not its bars.
            sub = sub[sub.notna().any(axis=1)]
            if not sub.empty:
                sub = sub.rename_axis("date").reset_index()
                sub["date"] = pd.to_datetime(sub["date"])
                if getattr(sub["date"].dt, "tz", None) is not None:
                    sub["date"] = sub["date"].dt.tz_localize(None)  # the exchange's wall date
                frame = sub
        if frame is not None:
            answer.frames[ticker] = frame
        elif ticker in errors:
            reason, transient = classify(errors[ticker])
            answer.fail(ticker, reason, transient)
        else:
            answer.fail(ticker, f"empty answer: yfinance returned no bars for {ticker} from {start} to {end}")
    return answer


def _events(ticker: str, sub: pd.DataFrame) -> list[Action]:
    """Splits and dividends from one ticker's columns: 'Stock Splits' is the ratio (10.0 for 10:1, 0 on
    other days); 'Dividends' the cash amount, turned into a factor with the previous raw close."""
    out: list[Action] = []
    days = [pd.Timestamp(d).date() for d in sub.index]
    if "Stock Splits" in sub.columns:
        for day, ratio in zip(days, sub["Stock Splits"].to_numpy(dtype=float), strict=True):
            if np.isfinite(ratio) and ratio > 0 and ratio != 1.0:
                out.append(Action(ticker, day, split_factor(ratio), "split", "yfinance"))
    if "Dividends" in sub.columns and "Close" in sub.columns:
        closes = sub["Close"].to_numpy(dtype=float)
        for i, amount in enumerate(sub["Dividends"].to_numpy(dtype=float)):
            prev = closes[:i][np.isfinite(closes[:i])]
            if np.isfinite(amount) and amount > 0 and len(prev) and prev[-1] > amount:
                out.append(Action(ticker, days[i], dividend_factor(amount, prev[-1]), "dividend", "yfinance"))
    return out


class YFinanceSource(PriceSource):
    name = "yfinance"

    def __init__(
        self,
        *,
        auto_adjust: bool = False,
        timeout: float = 10.0,
        attempts: int = 3,
        base_delay: float = 2.0,
        batch_size: int = 50,
        sleep: Callable[[float], None] = time.sleep,
        download: Callable[..., pd.DataFrame] | None = None,
    ):
        self.auto_adjust, self.timeout = auto_adjust, timeout
        self.attempts, self.base_delay, self.batch_size = max(1, attempts), base_delay, batch_size
        self.sleep = sleep
        self._download = download

    @classmethod
    def from_spec(cls, arg: str, *, seed: int) -> YFinanceSource:
        return cls.from_env()

    @classmethod
    def from_env(cls) -> YFinanceSource:
        return cls(
            auto_adjust=_flag("LDTM_YFINANCE_AUTO_ADJUST", False),
            timeout=setting_float("LDTM_YFINANCE_TIMEOUT"),
            attempts=setting_int("LDTM_SOURCE_ATTEMPTS"),
            batch_size=setting_int("LDTM_YFINANCE_BATCH"),
        )

    def describe(self) -> str:
        return f"yfinance auto_adjust={self.auto_adjust}"

    def downloader(self) -> Callable[..., pd.DataFrame]:
        if self._download is None:
            try:
                import yfinance
            except ImportError:
                raise InputError(
                    "price source yfinance needs its optional extra: pip install 'ldtm[yfinance]'"
                ) from None
            self._download = yfinance.download
        return self._download

    def fetch(self, tickers: Sequence[str], start: dt.date, end: dt.date) -> SourceAnswer:
        download = self.downloader()
        answer = SourceAnswer()
        remaining = list(tickers)
        for attempt in range(1, self.attempts + 1):
            with _capture_yfinance_errors() as errors:
                try:
                    data = download(
                        remaining,
                        start=start.isoformat(),
                        end=(end + dt.timedelta(days=1)).isoformat(),  # yfinance's end is exclusive
                        interval="1d",
                        auto_adjust=self.auto_adjust,
                        actions=not self.auto_adjust,  # events only go with raw closes
                        group_by="column",
                        multi_level_index=True,
                        progress=False,
                        threads=True,
                        timeout=self.timeout,
                    )
                    part = frames_from_download(
                        data, remaining, errors, start, end, events=not self.auto_adjust
                    )
                except Exception as exc:  # noqa: BLE001 - the whole request failed (network, HTTP)
                    part = SourceAnswer()
                    for t in remaining:
                        part.fail(t, f"HTTP/network error: {first_line(exc)}", transient=True)
            answer.merge(part)
            remaining = sorted(part.transient)
            if not remaining or attempt == self.attempts:
                break
            self.sleep(self.base_delay * 2 ** (attempt - 1))
        return answer
