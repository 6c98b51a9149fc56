"""A deterministic synthetic market: the offline default source (SPEC §2).

Each ticker's path mixes a shared market factor with its own regimes — trend, mean reversion and
high volatility — switching at random durations. OHLC is consistent by construction, volume rises
with the size of the move, and a few tickers list late (LATE_LISTINGS: recent IPOs with short history). The same
seed always gives the same prices, independent of which other tickers are generated.
"""

from __future__ import annotations

import datetime as dt
import zlib
from collections.abc import Sequence

import numpy as np
import pandas as pd

from .calendar import sessions_between
from .errors import InputError

# Real late listings in the universe (seed: < 3 years of history). Only these list late, so the
# long-lived names (AAPL, TSLA, AMZN...) always have their full history.
LATE_LISTINGS = {"FER", "GEHC", "CSGP", "ARM", "DASH", "ABNB", "PLTR", "APP"}
# Daily (drift, volatility, mean-reversion strength) per regime.
REGIMES = {
    "trend": (0.0006, 0.012, 0.0),
    "mean_reversion": (0.0, 0.010, 0.08),
    "high_volatility": (-0.0002, 0.032, 0.0),
}
REGIME_NAMES = tuple(REGIMES)
# The index ETF is the market factor itself; its levered siblings are multiples of it.
LEVERED = {"QQQ": 1.0, "TQQQ": 3.0, "SQQQ": -3.0}


def _rng(seed: int, *names: str) -> np.random.Generator:
    return np.random.default_rng([seed, *(zlib.crc32(n.encode()) for n in names)])


def _market_returns(n: int, seed: int) -> np.ndarray:
    rng = _rng(seed, "__market__")
    vol = np.where(rng.random(n) < 0.1, 0.02, 0.008)
    return 0.0003 + vol * rng.standard_normal(n)


def _regime_path(rng: np.random.Generator, n: int) -> np.ndarray:
    """Regime index per day: segments of geometric length (mean ~120 sessions)."""
    out = np.empty(n, dtype=np.int64)
    i = 0
    while i < n:
        length = int(rng.geometric(1 / 120))
        out[i : i + length] = rng.choice(len(REGIME_NAMES), p=[0.5, 0.3, 0.2])
        i += length
    return out


def _ticker_frame(ticker: str, sessions: np.ndarray, market: np.ndarray, seed: int) -> pd.DataFrame:
    rng = _rng(seed, ticker)
    n = len(sessions)
    start = 0
    if ticker in LATE_LISTINGS:
        # Listed within the last ~1.5-3 years of the range.
        start = max(0, n - int(rng.integers(380, 760)))
    if ticker in LEVERED:
        idio = LEVERED[ticker] * market + 0.002 * rng.standard_normal(n)
    else:
        regimes = _regime_path(rng, n)
        drift, vol, kappa = (np.array([REGIMES[r][k] for r in REGIME_NAMES])[regimes] for k in range(3))
        beta = rng.uniform(0.6, 1.6)
        shocks = drift + vol * rng.standard_normal(n)
        idio = np.empty(n)
        # Mean reversion pulls the log price back toward its recent anchor; the recursion is
        # inherently sequential, so it runs on plain floats (a few ms per ticker).
        level = anchor = 0.0
        for i in range(n):
            step = beta * market[i] + shocks[i] - kappa[i] * (level - anchor)
            anchor += 0.02 * (level - anchor)
            level += step
            idio[i] = step
    log_close = np.log(rng.uniform(15, 400)) + np.cumsum(idio)
    close = np.exp(log_close)
    prev_close = np.concatenate([[close[0] / np.exp(idio[0])], close[:-1]])
    open_ = prev_close * np.exp(0.3 * np.abs(idio).mean() * rng.standard_normal(n))
    body_hi, body_lo = np.maximum(open_, close), np.minimum(open_, close)
    spread = np.abs(idio) + 0.004
    high = body_hi * (1 + spread * rng.uniform(0.05, 0.6, n))
    low = body_lo * (1 - spread * rng.uniform(0.05, 0.6, n))
    base_volume = rng.uniform(2e6, 5e7)
    volume = base_volume * np.exp(0.35 * rng.standard_normal(n)) * (1 + 25 * np.abs(idio))
    frame = pd.DataFrame(
        {
            "ticker": ticker,
            "date": sessions,
            "open": open_.round(4),
            "high": high.round(4),
            "low": low.round(4),
            "close": close.round(4),
            "adj_close": close.round(4),
            "volume": volume.astype(np.int64),
        }
    )
    return frame.iloc[start:].reset_index(drop=True)


def generate(tickers: Sequence[str], start: dt.date | str, end: dt.date | str, seed: int = 0) -> pd.DataFrame:
    """Long frame (ticker, date, open, high, low, close, adj_close, volume) over XNYS sessions."""
    days = sessions_between(start, end)
    if len(days) < 2:
        raise InputError(f"synthetic range {start}..{end} holds fewer than 2 XNYS sessions")
    sessions = np.array(days)
    market = _market_returns(len(sessions), seed)
    frames = [_ticker_frame(t, sessions, market, seed) for t in tickers]
    df = pd.concat(frames, ignore_index=True)
    # Rounding can never break OHLC consistency: widen high/low to contain open and close.
    df["high"] = df[["high", "open", "close"]].max(axis=1)
    df["low"] = df[["low", "open", "close"]].min(axis=1)
    return df
