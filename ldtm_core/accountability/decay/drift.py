"""Feature drift: the population stability index (PSI) of each feature, recent window vs training window.

    PSI = sum_i (a_i - e_i) * ln(a_i / e_i)

over bins i fixed by the training window's deciles; e_i is the training share of bin i, a_i the recent
share. Empty shares are floored at EPSILON (1e-4) so a bin the training window never filled counts
heavily instead of infinitely. Bands (the usual reading): < 0.1 stable, 0.1-0.25 moderate shift,
>= 0.25 significant shift.

The basis (`model_inputs`): the model never sees a raw price level. Every sample window is min-max
normalised per feature over its own W rows (SPEC §4), so what the model reads for day t is where each
feature sits within its last W values. PSI on raw open/high/low/close/volume would flag every ticker
whose price trended since training (the level left the training range) although the model's inputs did
not move; PSI on the normalised newest row measures the drift the model is exposed to. `psi` itself is
basis-free.

Calibration: the usual bands assume independent draws. A recent window of 63 consecutive sessions is
not that: the features are strongly autocorrelated (a 30-day range position moves slowly), so the PSI of
an unchanged series over 63 sessions is often far above 0.25 (measured on the synthetic market: median
0.47 for `close` over the training window's own 63-session stretches; 0.14 for 63 independent draws).
So each feature's PSI is also compared with the PSIs of the training window's own non-overlapping
stretches of the same length (`null_p95`, their 95th percentile): `unusual` lists the features whose
recent PSI is beyond what the training window itself shows; that, not the band alone, is the drift signal.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

EPSILON = 1e-4
BANDS = ((0.1, "stable"), (0.25, "moderate"))  # below 0.1 stable, below 0.25 moderate, else significant
DECILES = np.linspace(0.1, 0.9, 9)
MIN_STRETCHES = 5  # training-window stretches needed for its 95th percentile to mean anything


def band(value: float | None) -> str:
    """'stable', 'moderate' or 'significant' for a PSI value ('unknown' for None / NaN)."""
    if value is None or not np.isfinite(value):
        return "unknown"
    for limit, name in BANDS:
        if value < limit:
            return name
    return "significant"


def decile_edges(reference) -> np.ndarray:
    """Inner bin edges: the distinct deciles of the reference (ties, e.g. a feature stuck at its window
    maximum, merge bins rather than make empty ones)."""
    ref = np.asarray(reference, dtype=np.float64)
    ref = ref[np.isfinite(ref)]
    if ref.size == 0:
        raise ValueError("PSI needs a non-empty reference (training) sample")
    return np.unique(np.quantile(ref, DECILES))


def shares(values, edges: np.ndarray) -> np.ndarray:
    """Share of `values` in each bin (-inf, e1), [e1, e2), ..., [ek, inf)."""
    v = np.asarray(values, dtype=np.float64)
    v = v[np.isfinite(v)]
    counts = np.bincount(np.searchsorted(edges, v, side="right"), minlength=len(edges) + 1)
    return counts / max(len(v), 1)


def psi(reference, recent, edges: np.ndarray | None = None) -> float:
    """PSI of `recent` against `reference`, bins from the reference's deciles unless `edges` given."""
    if not np.isfinite(np.asarray(recent, dtype=np.float64)).any():
        raise ValueError("PSI needs a non-empty recent sample")
    edges = decile_edges(reference) if edges is None else np.asarray(edges, dtype=np.float64)
    e = np.maximum(shares(reference, edges), EPSILON)
    a = np.maximum(shares(recent, edges), EPSILON)
    return float(np.sum((a - e) * np.log(a / e)))


def model_inputs(frame: pd.DataFrame, window: int) -> pd.DataFrame:
    """Each feature at day t as the model sees it: min-max normalised over the W rows ending at t (0
    where max == min, as SPEC §4); rows before the first full window dropped."""
    lo = frame.rolling(window).min()
    hi = frame.rolling(window).max()
    span = hi - lo
    out = ((frame - lo) / span.where(span > 0)).where(span > 0, 0.0)
    return out.iloc[window - 1 :]


def stretch_psi(reference, length: int, edges: np.ndarray | None = None) -> np.ndarray:
    """PSI of each non-overlapping stretch of `length` consecutive reference rows against the whole
    reference: how large the PSI of a window of that length gets with no drift at all."""
    ref = np.asarray(reference, dtype=np.float64)
    edges = decile_edges(ref) if edges is None else edges
    return np.array([psi(ref, ref[i : i + length], edges) for i in range(0, len(ref) - length + 1, length)])


@dataclass(frozen=True)
class FeatureDrift:
    """PSI per feature of one ticker, with the windows it compared."""

    ticker: str
    values: dict[str, float]
    reference_rows: int
    recent_rows: int
    recent_start: object = None
    recent_end: object = None
    reference_end: object = None  # the data cutoff the reference window ends on (decay: the recipe's)
    reason: str = ""  # why nothing was computed (too few recent rows, no features)
    null_p95: dict[str, float] = field(default_factory=dict)  # per feature; empty: too few stretches

    @property
    def unusual(self) -> list[str]:
        """Features whose PSI is beyond the 95th percentile of the training window's own stretches."""
        return [f for f, v in self.values.items() if f in self.null_p95 and v > self.null_p95[f]]

    @property
    def max_feature(self) -> str | None:
        return max(self.values, key=self.values.get) if self.values else None

    @property
    def max_psi(self) -> float | None:
        return self.values[self.max_feature] if self.values else None

    @property
    def band(self) -> str:
        return band(self.max_psi)

    def describe(self) -> str:
        if not self.values:
            return f"{self.ticker}: PSI not computed ({self.reason})"
        beyond = ", ".join(self.unusual) or "none"
        return (
            f"{self.ticker}: max PSI {self.max_psi:.3f} ({self.max_feature}, {self.band}); beyond the "
            f"training window's own spread: {beyond}"
            + (f" (reference up to {self.reference_end})" if self.reference_end else "")
        )


def feature_drift(
    ticker: str,
    reference: pd.DataFrame,
    recent: pd.DataFrame,
    min_recent: int = 20,
) -> FeatureDrift:
    """PSI of every column of `recent` against `reference` (same columns, model-input basis or raw)."""
    if len(reference) < 10:
        return FeatureDrift(ticker, {}, len(reference), len(recent), reason="fewer than 10 training rows")
    if len(recent) < min_recent:
        return FeatureDrift(
            ticker,
            {},
            len(reference),
            len(recent),
            reason=f"{len(recent)} sessions since the training window, need {min_recent}",
        )
    values, null = {}, {}
    for c in reference.columns:
        ref = reference[c].to_numpy()
        edges = decile_edges(ref)
        values[c] = psi(ref, recent[c].to_numpy(), edges)
        stretches = stretch_psi(ref, len(recent), edges)
        if len(stretches) >= MIN_STRETCHES:
            null[c] = float(np.quantile(stretches, 0.95))
    return FeatureDrift(
        ticker,
        values,
        len(reference),
        len(recent),
        recent_start=recent.index[0],
        recent_end=recent.index[-1],
        null_p95=null,
    )
