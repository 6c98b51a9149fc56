"""The 11 daily features of SPEC §3, vectorised. Nothing at day t uses data after t."""

from __future__ import annotations

import numpy as np
import pandas as pd
from numpy.lib.stride_tricks import sliding_window_view

from ldtm_core.feature_names import FEATURE_NAMES

CLOSE_INDEX = FEATURE_NAMES.index("close")
RSI_PERIOD = 14
SMA_PERIODS = (5, 10, 20)
# Rows before this index lack full history for some feature (SMA-20 needs 20 closes).
WARMUP_ROWS = max(max(SMA_PERIODS) - 1, RSI_PERIOD, 5)


def _wilder_average(x: np.ndarray, period: int) -> np.ndarray:
    """Wilder smoothing along axis 1 of [T, L]: the first average (at index `period`) is the mean of
    x[1..period], then avg_t = (avg_{t-1} * (period - 1) + x_t) / period. NaN before the seed."""
    seeded = np.full_like(x, np.nan)
    if x.shape[1] > period:
        seeded[:, period] = x[:, 1 : period + 1].mean(axis=1)
        seeded[:, period + 1 :] = x[:, period + 1 :]
    # ewm(adjust=False) from the seed is exactly Wilder's recursion with alpha = 1/period; pandas runs
    # it in C over every column at once.
    return pd.DataFrame(seeded.T).ewm(alpha=1.0 / period, adjust=False).mean().to_numpy().T


def rsi_array(close: np.ndarray, period: int = RSI_PERIOD) -> np.ndarray:
    """RSI with Wilder smoothing for [T, L] closes. 100 when there are no losses, 50 when flat."""
    delta = np.concatenate([np.full((close.shape[0], 1), np.nan), np.diff(close, axis=1)], axis=1)
    avg_gain = _wilder_average(np.clip(delta, 0, None), period)
    avg_loss = _wilder_average(np.clip(-delta, 0, None), period)
    with np.errstate(divide="ignore", invalid="ignore"):
        rsi = 100.0 - 100.0 / (1.0 + avg_gain / avg_loss)
    rsi = np.where((avg_loss == 0) & (avg_gain > 0), 100.0, rsi)
    rsi = np.where((avg_loss == 0) & (avg_gain == 0), 50.0, rsi)
    rsi[:, :period] = np.nan
    return rsi


def wilder_rsi(close: pd.Series, period: int = RSI_PERIOD) -> pd.Series:
    """RSI-14 of one close series (see rsi_array)."""
    return pd.Series(rsi_array(close.to_numpy(dtype=np.float64)[None, :], period)[0], index=close.index)


def _shifted_ratio(c: np.ndarray, lag: int) -> np.ndarray:
    """ln(c_t / c_{t-lag}) along axis 1, NaN for the first `lag` columns."""
    out = np.full_like(c, np.nan)
    with np.errstate(divide="ignore", invalid="ignore"):
        out[:, lag:] = np.log(c[:, lag:] / c[:, :-lag])
    return out


def feature_array(o: np.ndarray, h: np.ndarray, lo: np.ndarray, c: np.ndarray, v: np.ndarray) -> np.ndarray:
    """The 11 features for T aligned series at once: [T, L] arrays -> [T, L, 11] (NaN during warm-up).

    The single implementation of SPEC §3: one ticker's training history and a whole universe's
    inference windows both go through here.
    """
    smas = []
    for n in SMA_PERIODS:
        sma = np.full_like(c, np.nan)
        if c.shape[1] >= n:
            sma[:, n - 1 :] = c[:, n - 1 :] / sliding_window_view(c, n, axis=1).mean(axis=-1)
        smas.append(sma)
    columns = [o, h, lo, c, v, _shifted_ratio(c, 1), _shifted_ratio(c, 5), rsi_array(c), *smas]
    return np.stack(columns, axis=2)


def compute_features(prices: pd.DataFrame, max_gap: int | None = None) -> pd.DataFrame:
    """Feature frame indexed by date for one ticker's prices (columns date, open, high, low, close, volume).

    Rows without full history for every feature are dropped. A hole of more than `max_gap` sessions
    (default LDTM_MAX_GAP_SESSIONS, price_gaps) restarts the features: each side is computed alone, with
    its own warm-up, so no row looks back across it. A series without such a hole is one segment and
    comes out exactly as before the rule.
    """
    from ldtm_core.data.price_gaps import segment_ids  # the calendar: only needed here

    df = prices.sort_values("date").reset_index(drop=True)
    segments = segment_ids(df["date"], max_gap)
    if len(segments) and segments[-1] > 0:
        starts = np.flatnonzero(np.diff(segments)) + 1
        parts = np.split(np.arange(len(df)), starts)
        return pd.concat([_segment_features(df.iloc[idx]) for idx in parts])
    return _segment_features(df)


def _segment_features(df: pd.DataFrame) -> pd.DataFrame:
    arrays = [df[k].to_numpy(dtype=np.float64)[None, :] for k in ("open", "high", "low", "close", "volume")]
    out = pd.DataFrame(feature_array(*arrays)[0], columns=list(FEATURE_NAMES))
    out.index = pd.Index(df["date"].to_numpy(), name="date")
    return out.iloc[WARMUP_ROWS:].dropna()
