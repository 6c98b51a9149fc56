"""The daily features of SPEC §3: one registry, `FEATURES` (name -> its vectorised definition), and the
reference recipe's tuple, `REFERENCE_FEATURES`. A model records the tuple it was trained on
(`ModelConfig.features`) and every frame or array here is built for such a tuple. Nothing at day t uses
data after t.

Adding a feature is one entry in `FEATURES`: stored models keep their tuple, and the feature store serves
a feature it has no column for by computing it from the prices on read (`feature_store`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import NamedTuple

import numpy as np
import pandas as pd
from numpy.lib.stride_tricks import sliding_window_view

from ldtm_core.feature_names import REFERENCE_FEATURES

RSI_PERIOD = 14
SMA_PERIODS = (5, 10, 20)


class Bars(NamedTuple):
    """T aligned price series, each a [T, L] float64 array (L sessions, oldest first)."""

    open: np.ndarray
    high: np.ndarray
    low: np.ndarray
    close: np.ndarray
    volume: np.ndarray


@dataclass(frozen=True)
class Feature:
    """One feature's definition: `compute(bars)` -> [T, L], NaN for at least its first `warmup` sessions
    (the history it needs) and wherever it is undefined."""

    compute: Callable[[Bars], np.ndarray]
    warmup: int

    def __call__(self, bars: Bars) -> np.ndarray:
        return self.compute(bars)


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


def _close_over_sma(bars: Bars, n: int) -> np.ndarray:
    """c_t / SMA_n(c)_t along axis 1, NaN for the first n - 1 columns."""
    c = bars.close
    out = np.full_like(c, np.nan)
    if c.shape[1] >= n:
        out[:, n - 1 :] = c[:, n - 1 :] / sliding_window_view(c, n, axis=1).mean(axis=-1)
    return out


FEATURES: dict[str, Feature] = {
    "open": Feature(lambda b: b.open, 0),
    "high": Feature(lambda b: b.high, 0),
    "low": Feature(lambda b: b.low, 0),
    "close": Feature(lambda b: b.close, 0),
    "volume": Feature(lambda b: b.volume, 0),
    "log_return_1d": Feature(lambda b: _shifted_ratio(b.close, 1), 1),
    "log_return_5d": Feature(lambda b: _shifted_ratio(b.close, 5), 5),
    "rsi_14": Feature(lambda b: rsi_array(b.close), RSI_PERIOD),
    **{f"close_sma_{n}": Feature(partial(_close_over_sma, n=n), n - 1) for n in SMA_PERIODS},
}


def unknown_features(names: Sequence[str]) -> list[str]:
    """The names in `names` that `FEATURES` does not define."""
    return [n for n in names if n not in FEATURES]


def warmup_rows(names: Sequence[str] = REFERENCE_FEATURES) -> int:
    """Sessions at the start of a series (or after a long hole) that a frame of `names` drops: the
    longest warm-up among them, and never fewer than the reference recipe's, so that every recipe's rows
    are rows the feature store holds."""
    return max(FEATURES[n].warmup for n in (*REFERENCE_FEATURES, *names))


# The reference recipe's warm-up (SMA-20 needs 20 closes) and where its close column is.
WARMUP_ROWS = warmup_rows(REFERENCE_FEATURES)
CLOSE_INDEX = REFERENCE_FEATURES.index("close")


def feature_array(
    o: np.ndarray,
    h: np.ndarray,
    lo: np.ndarray,
    c: np.ndarray,
    v: np.ndarray,
    names: Sequence[str] = REFERENCE_FEATURES,
) -> np.ndarray:
    """The features `names` for T aligned series at once: [T, L] arrays -> [T, L, len(names)] (NaN during
    warm-up).

    The single implementation of SPEC §3: one ticker's training history and a whole universe's
    inference windows both go through here.
    """
    bars = Bars(o, h, lo, c, v)
    return np.stack([FEATURES[n](bars) for n in names], axis=2)


def compute_features(
    prices: pd.DataFrame, max_gap: int | None = None, names: Sequence[str] = REFERENCE_FEATURES
) -> pd.DataFrame:
    """Feature frame of `names` indexed by date for one ticker's prices (columns date, open, high, low,
    close, volume).

    Rows without full history for every feature are dropped. A hole of more than `max_gap` sessions
    (default LDTM_MAX_GAP_SESSIONS, price_gaps) restarts the features: each side is computed alone, with
    its own warm-up, so no row looks back across it. A series without such a hole is one segment and
    comes out exactly as before the rule.
    """
    from ldtm_core.data.price_gaps import segment_ids  # the calendar: only needed here

    names = tuple(names)
    df = prices.sort_values("date").reset_index(drop=True)
    segments = segment_ids(df["date"], max_gap)
    if len(segments) and segments[-1] > 0:
        starts = np.flatnonzero(np.diff(segments)) + 1
        parts = np.split(np.arange(len(df)), starts)
        return pd.concat([_segment_features(df.iloc[idx], names) for idx in parts])
    return _segment_features(df, names)


def _segment_features(df: pd.DataFrame, names: tuple[str, ...]) -> pd.DataFrame:
    arrays = [df[k].to_numpy(dtype=np.float64)[None, :] for k in ("open", "high", "low", "close", "volume")]
    out = pd.DataFrame(feature_array(*arrays, names=names)[0], columns=list(names))
    out.index = pd.Index(df["date"].to_numpy(), name="date")
    return out.iloc[warmup_rows(names) :].dropna()
