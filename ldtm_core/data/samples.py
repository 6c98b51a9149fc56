"""Windows, per-window min-max normalisation and the targets of SPEC §4 (one column per horizon of
`ldtm_core.horizons.HORIZONS`, H of them), as precomputed arrays.

Everything is vectorised: one ticker's twenty years become `[N, W, F]` float32 in one pass (F: the
model's features).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from numpy.lib.stride_tricks import sliding_window_view

from ldtm_core.data.calendar import ONE_MONTH_SESSIONS, target_dates
from ldtm_core.data.features import compute_features
from ldtm_core.data.price_gaps import segment_ids
from ldtm_core.horizons import HORIZONS


@dataclass
class SampleSet:
    """Samples for one ticker. Row i is the window ending at `dates[i]`.

    `y` holds normalised targets (NaN where the target date has no price yet); `close_min`/`close_max`
    are the window's close range used to (de)normalise; `close` is the close at the sample date and
    `prev_close` the one before it.
    """

    x: np.ndarray  # [N, W, F] float32
    y: np.ndarray  # [N, H] float32
    close_min: np.ndarray  # [N] float64
    close_max: np.ndarray  # [N] float64
    close: np.ndarray  # [N] float64
    prev_close: np.ndarray  # [N] float64
    dates: np.ndarray  # [N] datetime64[D]
    target_dates: np.ndarray  # [N, H] datetime64[D]
    target_close: np.ndarray  # [N, H] float64, NaN where unknown

    def __len__(self) -> int:
        return len(self.dates)

    def subset(self, mask_or_index) -> SampleSet:
        return SampleSet(**{k: getattr(self, k)[mask_or_index] for k in self.__dataclass_fields__})

    @property
    def labeled(self) -> np.ndarray:
        """Rows whose targets are all known (usable for training and scoring)."""
        return ~np.isnan(self.y).any(axis=1)

    def denormalise(self, y_norm: np.ndarray) -> np.ndarray:
        """Prices for predictions of every row of this set (use subset() first for fewer rows)."""
        if len(y_norm) != len(self):
            # numpy would broadcast a shorter array against the wrong windows without a word
            raise ValueError(f"denormalise got {len(y_norm)} rows for a set of {len(self)}; subset() first")
        return denormalise(y_norm, self.close_min, self.close_max)


def _scale(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    # A flat window has no range: features become 0 and targets stay invertible as offsets.
    span = hi - lo
    return np.where(span > 0, span, 1.0)


def normalise_targets(closes: np.ndarray, close_min: np.ndarray, close_max: np.ndarray) -> np.ndarray:
    return (closes - close_min[:, None]) / _scale(close_min, close_max)[:, None]


def denormalise(y_norm: np.ndarray, close_min: np.ndarray, close_max: np.ndarray) -> np.ndarray:
    return np.asarray(y_norm, dtype=np.float64) * _scale(close_min, close_max)[:, None] + close_min[:, None]


def normalise_windows(windows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-window, per-column min-max to [0, 1] (0 where the column is constant). Returns x, min, max."""
    lo = windows.min(axis=1, keepdims=True)
    hi = windows.max(axis=1, keepdims=True)
    span = hi - lo
    with np.errstate(invalid="ignore", divide="ignore"):
        x = np.where(span > 0, (windows - lo) / np.where(span > 0, span, 1.0), 0.0)
    return x.astype(np.float32), lo[:, 0, :], hi[:, 0, :]


def build_samples(
    prices: pd.DataFrame,
    window: int = 30,
    month_sessions: int = ONE_MONTH_SESSIONS,
    features: pd.DataFrame | None = None,
    names: Sequence[str] | None = None,
) -> SampleSet:
    """All samples of one ticker from its price frame (date, open, high, low, close, volume).

    `names`: the model's features, in input order (default: the columns of `features`, or the reference
    recipe's). `features`: the ticker's feature frame when the caller has it already (the feature store's
    read); computed from `prices` otherwise. Targets always come from `prices`, scaled by the window's
    range of the `close` feature, which every feature tuple therefore holds.
    """
    if features is None:
        feats = compute_features(prices) if names is None else compute_features(prices, names=names)
    else:
        feats = features if names is None else features[list(names)]
    if "close" not in feats.columns:
        raise ValueError(
            f"features {', '.join(feats.columns)} hold no close: targets are scaled by its range"
        )
    close_index = list(feats.columns).index("close")
    values = feats.to_numpy(dtype=np.float64)
    dates = feats.index.to_numpy().astype("datetime64[D]")
    n_feat = values.shape[1]
    if len(values) < window:
        empty = np.empty((0,), dtype="datetime64[D]")
        return SampleSet(
            x=np.empty((0, window, n_feat), np.float32),
            y=np.empty((0, len(HORIZONS)), np.float32),
            close_min=np.empty(0),
            close_max=np.empty(0),
            close=np.empty(0),
            prev_close=np.empty(0),
            dates=empty,
            target_dates=np.empty((0, len(HORIZONS)), "datetime64[D]"),
            target_close=np.empty((0, len(HORIZONS))),
        )
    # Targets come from the ticker's own price rows, looked up by calendar date; a date with no price is NaN.
    px = prices.sort_values("date")
    px_dates = pd.to_datetime(px["date"]).to_numpy().astype("datetime64[D]")
    # A window lies within one segment of the prices (price_gaps): none reaches back across a long hole.
    if len(px_dates):
        segment = segment_ids(px_dates)[np.minimum(np.searchsorted(px_dates, dates), len(px_dates) - 1)]
    else:
        segment = np.zeros(len(dates), dtype=np.int64)
    keep = segment[window - 1 :] == segment[: len(segment) - window + 1]

    windows = sliding_window_view(values, window, axis=0).transpose(0, 2, 1)  # [N, W, F]
    if not keep.all():
        windows = windows[keep]
    x, lo, hi = normalise_windows(windows)
    close_min, close_max = lo[:, close_index], hi[:, close_index]
    sample_dates = dates[window - 1 :][keep]
    close = values[window - 1 :, close_index][keep]
    # The close before the sample date: the previous bar, which a kept window always holds (window >= 2).
    prev_close = np.concatenate([[np.nan], values[:-1, close_index]])[window - 1 :][keep]
    px_close = px["close"].to_numpy(dtype=np.float64)
    t_dates = np.stack(list(target_dates(sample_dates, month_sessions).values()), axis=1)
    pos = np.searchsorted(px_dates, t_dates)
    pos_clipped = np.minimum(pos, len(px_dates) - 1)
    found = (pos < len(px_dates)) & (px_dates[pos_clipped] == t_dates)
    target_close = np.where(found, px_close[pos_clipped], np.nan)
    y = normalise_targets(target_close, close_min, close_max).astype(np.float32)
    return SampleSet(
        x=np.ascontiguousarray(x),
        y=y,
        close_min=close_min,
        close_max=close_max,
        close=close,
        prev_close=prev_close,
        dates=sample_dates,
        target_dates=t_dates,
        target_close=target_close,
    )
