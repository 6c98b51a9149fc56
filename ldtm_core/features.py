"""The 11 daily features of SPEC §3, vectorised. Nothing at day t uses data after t."""

from __future__ import annotations

import numpy as np
import pandas as pd

FEATURE_NAMES: tuple[str, ...] = (
    "open",
    "high",
    "low",
    "close",
    "volume",
    "log_return_1d",
    "log_return_5d",
    "rsi_14",
    "close_sma_5",
    "close_sma_10",
    "close_sma_20",
)
CLOSE_INDEX = FEATURE_NAMES.index("close")
RSI_PERIOD = 14
SMA_PERIODS = (5, 10, 20)
# Rows before this index lack full history for some feature (SMA-20 needs 20 closes).
WARMUP_ROWS = max(max(SMA_PERIODS) - 1, RSI_PERIOD, 5)


def wilder_rsi(close: pd.Series, period: int = RSI_PERIOD) -> pd.Series:
    """RSI with Wilder smoothing: the first average is the simple mean of `period` changes,
    then avg_t = (avg_{t-1} * (period - 1) + x_t) / period. 100 when there are no losses,
    50 when the price did not move at all."""
    delta = close.diff().to_numpy()
    gains, losses = np.clip(delta, 0, None), np.clip(-delta, 0, None)

    def smooth(x: np.ndarray) -> np.ndarray:
        seeded = np.full_like(x, np.nan)
        if len(x) > period:
            seeded[period] = x[1 : period + 1].mean()
            seeded[period + 1 :] = x[period + 1 :]
        # adjust=False from the seed is exactly Wilder's recursion with alpha = 1/period.
        return pd.Series(seeded).ewm(alpha=1.0 / period, adjust=False).mean().to_numpy()

    avg_gain, avg_loss = smooth(gains), smooth(losses)
    with np.errstate(divide="ignore", invalid="ignore"):
        rsi = 100.0 - 100.0 / (1.0 + avg_gain / avg_loss)
    rsi = np.where((avg_loss == 0) & (avg_gain > 0), 100.0, rsi)
    rsi = np.where((avg_loss == 0) & (avg_gain == 0), 50.0, rsi)
    rsi[:period] = np.nan
    return pd.Series(rsi, index=close.index)


def compute_features(prices: pd.DataFrame) -> pd.DataFrame:
    """Feature frame indexed by date for one ticker's prices (columns date, open, high, low, close, volume).

    Rows without full history for every feature are dropped.
    """
    df = prices.sort_values("date").reset_index(drop=True)
    close = df["close"].astype("float64")
    out = pd.DataFrame(
        {
            "date": df["date"].to_numpy(),
            "open": df["open"].astype("float64"),
            "high": df["high"].astype("float64"),
            "low": df["low"].astype("float64"),
            "close": close,
            "volume": df["volume"].astype("float64"),
            "log_return_1d": np.log(close / close.shift(1)),
            "log_return_5d": np.log(close / close.shift(5)),
            "rsi_14": wilder_rsi(close),
        }
    )
    for n in SMA_PERIODS:
        out[f"close_sma_{n}"] = close / close.rolling(n).mean()
    return out.iloc[WARMUP_ROWS:].dropna().set_index("date")[list(FEATURE_NAMES)]
