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
not that: the inputs are strongly autocorrelated (a 30-day range position moves slowly), so the PSI of an
unchanged series over 63 sessions is often far above 0.25 (measured on the synthetic market: median 0.47
for `close` over the training window's own 63-session stretches; 0.14 for 63 independent draws).

`unusual` is the drift signal, calibrated as a family: on a ticker whose inputs did not change, the
chance that any of its inputs is listed is at most FAMILY_ALPHA (5 %), whatever the number of inputs. An
input is listed when its PSI exceeds its `limits` entry, read off a null simulated from the reference
(training) window alone (`null_limits`, seeded by the ticker, so deterministic):
- each input's normal scores (ranks through the normal quantile, ties averaged) get an AR(p) (Yule-Walker,
  p by AIC up to MAX_LAG); the inputs' innovations keep their correlation;
- the AR is estimated, and near persistence 1 the estimate understates it (in trials the plug-in fit
  alone flagged ~10 % of unchanged AR(1) tickers at phi 0.95): each simulation uses coefficients drawn as
  the estimate scatters around the truth, 2 fit - refit, the refit on a reference simulated from the fit
  (a parametric bootstrap reflected about the estimate, which also removes its bias);
- pairs are simulated (a reference as long as the training window, recent windows as long as the recent
  one, SEPARATION sessions apart), mapped back through the reference's own values (its point masses, e.g.
  an input at its window's minimum, stay), and their PSIs computed as above;
- the limits are one upper order statistic of each input's simulated PSIs, the same for every input,
  the highest at which at most 5 % of the simulated pairs exceed any limit (each judged against limits
  from the other pairs, so a new exchangeable pair does so with probability <= 5 %).
An input so persistent that unchanged windows often sit wholly in one decile reaches PSI's ceiling (~8.3)
under the null: its limit is that ceiling, and PSI cannot call it unusual.
"""

from __future__ import annotations

import hashlib
import zlib
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import scipy.fft as sfft
from scipy.signal import lfilter
from scipy.special import ndtr, ndtri
from statsmodels.tsa.stattools import acovf, levinson_durbin

EPSILON = 1e-4
BANDS = ((0.1, "stable"), (0.25, "moderate"))  # below 0.1 stable, below 0.25 moderate, else significant
DECILES = np.linspace(0.1, 0.9, 9)
FAMILY_ALPHA = 0.05  # the chance that a ticker whose inputs did not change shows any unusual input
SIMULATIONS = 500  # simulated (reference, recent) pairs per ticker
WINDOWS = 4  # recent windows per simulated reference (the reference is most of the cost)
DRAWS = 50  # AR coefficient draws (the fit's scatter), cycled over the simulated references (at most
# one per two references: with few simulations the draws, not the references, would be the cost)
MAX_LAG = 30  # the longest AR fitted to an input (the model's window; fewer for a short reference)
MAX_ROOT = 0.998  # a drawn AR's roots are kept inside this radius (stationary, ~350 sessions' memory)
SEPARATION = 100  # sessions between the simulated reference and recent window
MIN_REFERENCE = 100  # reference rows needed to fit the null
SEED = 20240611


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


def _counts_below(codes: np.ndarray, levels: int) -> np.ndarray:
    """[rows, levels + 1]: per row of integer codes (< levels), how many are < j, for j = 0..levels."""
    rows = len(codes)
    hist = np.bincount((codes + np.arange(rows)[:, None] * levels).ravel(), minlength=rows * levels)
    return np.concatenate([np.zeros((rows, 1), np.int64), hist.reshape(rows, levels).cumsum(axis=1)], axis=1)


def _normal_scores(codes: np.ndarray, levels: int) -> np.ndarray:
    """Each row's ranks (ties averaged) through the normal quantile: the Gaussian-copula scale."""
    n = codes.shape[1]
    below = _counts_below(codes, levels)
    twice_rank = 2 * below[:, :-1] + np.diff(below, axis=1) + 1  # twice each code's mean rank (1-based)
    quantile = ndtri((np.arange(2 * n + 1) / 2 - 0.5).clip(0.25) / n)  # per twice-rank, looked up
    return quantile[np.take_along_axis(twice_rank, codes, axis=1)]


def _acov_rows(z: np.ndarray, nlag: int) -> np.ndarray:
    """Biased autocovariances (as statsmodels' `acovf`) of each row of z, lags 0..nlag, via one FFT."""
    n = z.shape[1]
    f = sfft.rfft((z - z.mean(axis=1, keepdims=True)).astype(np.float32), n=sfft.next_fast_len(2 * n), axis=1)
    return sfft.irfft(f.real**2 + f.imag**2, axis=1)[:, : nlag + 1].astype(np.float64) / n


def _yule_walker(acov: np.ndarray, order: int) -> np.ndarray:
    """[rows, order] Yule-Walker AR coefficients from each row's autocovariances (0 for a constant row)."""
    if order == 0:
        return np.zeros((len(acov), 0))
    acov = np.where(acov[:, :1] > 0, acov, np.eye(1, acov.shape[1]))
    toeplitz = acov[:, np.abs(np.subtract.outer(np.arange(order), np.arange(order)))]
    return np.linalg.solve(toeplitz, acov[:, 1 : order + 1, None])[..., 0]


def _fit(z: np.ndarray, max_lag: int) -> np.ndarray:
    """AR coefficients of one series of normal scores, the order by AIC (Levinson-Durbin over the orders)."""
    acov = acovf(z, fft=True, nlag=max_lag)
    if acov[0] <= 0:  # a constant input
        return np.zeros(0)
    ld = levinson_durbin(acov / acov[0], nlags=max_lag, isacov=True)
    sigma = np.asarray(ld.sigma, dtype=np.float64)
    sigma[0] = 1.0  # order 0: the variance itself (statsmodels leaves it 0)
    order = int(np.argmin(len(z) * np.log(np.maximum(sigma, 1e-300)) + 2 * np.arange(max_lag + 1)))
    return _yule_walker(acov[None, :], order)[0]


def _stationary(phi: np.ndarray) -> np.ndarray:
    """Rows of AR coefficients [G, p] with every root's modulus brought within MAX_ROOT (multiplying
    phi_j by s^j multiplies each root by s): a reflected draw may cross the unit circle."""
    p = phi.shape[1]
    if p == 0:
        return phi
    companion = np.zeros((len(phi), p, p))
    companion[:, 0, :] = phi
    companion[:, 1:, :-1] = np.eye(p - 1)
    radius = np.abs(np.linalg.eigvals(companion)).max(axis=1)
    scale = np.minimum(1.0, MAX_ROOT / np.maximum(radius, 1e-12))
    return phi * scale[:, None] ** np.arange(1, p + 1)


def _transfer(phi: np.ndarray, m: int) -> np.ndarray:
    """Frequency response [G, m//2 + 1] of each AR row [G, p], scaled to unit stationary variance."""
    a = sfft.rfft(np.hstack([np.ones((len(phi), 1)), -phi]), n=m, axis=1)
    power = 1.0 / (a.real**2 + a.imag**2)  # |1 / a|^2
    # Parseval over the whole circle: the rfft's inner frequencies stand for two each.
    variance = (2 * power.sum(axis=1) - power[:, 0] - (power[:, -1] if m % 2 == 0 else 0)) / m
    return np.conj(a) * (power / np.sqrt(variance)[:, None])


def _gaussian_paths(rng, transfers: list[np.ndarray], paths: int, mix: np.ndarray, m: int) -> np.ndarray:
    """[F, paths, m] circular Gaussian paths: white noise, its inputs correlated through `mix`, each
    filtered by an AR (transfers[f]: its frequency response, one row or one per path). Drawn in the
    frequency domain, where white noise is independent complex normals (real at 0 and m/2)."""
    inputs, half = len(transfers), m // 2 + 1
    noise = rng.standard_normal((inputs, paths * half * 2), dtype=np.float32)
    spectrum = (mix.astype(np.float32) @ noise).view(np.complex64).reshape(inputs, paths, half)
    real = [0, half - 1] if m % 2 == 0 else [0]
    spectrum[..., real] = spectrum[..., real].real * np.float32(np.sqrt(2))
    for f, h in enumerate(transfers):
        spectrum[f] *= (h * np.sqrt(m / 2)).astype(np.complex64)  # white noise's spectrum has variance m
    return sfft.irfft(spectrum, n=m, axis=-1)


def _codes_of(z: np.ndarray, sorted_codes: np.ndarray) -> np.ndarray:
    """Gaussian-copula values -> the reference's own values (as codes): its u-quantile, u = Phi(z)."""
    n = len(sorted_codes)
    return sorted_codes[np.minimum((ndtr(z) * n).astype(np.int32), n - 1)]


def _psi_codes(ref: np.ndarray, recent: np.ndarray, levels: int) -> np.ndarray:
    """`psi` of each reference row (integer codes < levels) against each of its recent windows [rows, W,
    m] -> [rows, W], vectorised: bins at the reference row's deciles, interpolated as np.quantile does."""
    rows, n = ref.shape
    row_ids = np.arange(rows)[:, None]
    cum = _counts_below(ref, levels)
    # The i-th smallest code of a row is the first c with #(codes <= c) > i: one search over the rows'
    # counts laid end to end (each row offset by n + 1 keeps the whole array sorted).
    flat = (cum[:, 1:] + row_ids * (n + 1)).ravel()

    def sorted_at(i: np.ndarray) -> np.ndarray:
        return np.searchsorted(flat, i[None, :] + row_ids * (n + 1), side="right") - row_ids * levels

    pos = DECILES * (n - 1)
    lo = np.floor(pos).astype(np.int64)
    frac = pos - lo
    edges = sorted_at(lo) * (1 - frac) + sorted_at(np.minimum(lo + 1, n - 1)) * frac
    cut = np.ceil(edges).astype(np.int64)  # an integer code v lies below edge e iff v < ceil(e)

    e = np.diff(np.take_along_axis(cum, cut, axis=1), axis=1, prepend=0, append=n) / n
    # Each recent code's bin: how many of its row's cuts are <= it (the cuts laid end to end, as above).
    windows, m = recent.shape[1:]
    flat_cut = (cut + row_ids * levels).ravel()
    shifted = recent + (row_ids * levels)[:, :, None]
    bins = np.searchsorted(flat_cut, shifted, side="right") - (row_ids * len(DECILES))[:, :, None]
    slots = (np.arange(rows * windows).reshape(rows, windows, 1) * (len(DECILES) + 1) + bins).ravel()
    a = np.bincount(slots, minlength=rows * windows * (len(DECILES) + 1)).reshape(rows, windows, -1) / m
    e = np.maximum(e, EPSILON)[:, None, :]
    a = np.maximum(a, EPSILON)
    return ((a - e) * np.log(a / e)).sum(axis=2)


def null_psi(reference: np.ndarray, length: int, rng, sims: int = SIMULATIONS) -> np.ndarray:
    """[sims, F] PSIs of unchanged series like the reference's F columns, each a simulated reference as
    long as this one against a simulated recent window of `length` (module docstring)."""
    ref = np.asarray(reference, dtype=np.float64)
    n, inputs = ref.shape
    codes = np.column_stack([np.unique(ref[:, f], return_inverse=True)[1].ravel() for f in range(inputs)])
    sorted_codes = np.sort(codes, axis=0)
    levels = sorted_codes[-1] + 1
    z = np.column_stack([_normal_scores(codes[None, :, f], levels[f])[0] for f in range(inputs)])
    phis = [_fit(z[:, f], min(MAX_LAG, n // 10)) for f in range(inputs)]
    lag = max(len(p) for p in phis)
    residuals = np.column_stack([lfilter(np.r_[1.0, -p], [1.0], z[:, f])[lag:] for f, p in enumerate(phis)])
    with np.errstate(invalid="ignore", divide="ignore"):  # a constant input's residuals: no correlation
        corr = np.nan_to_num(np.corrcoef(residuals, rowvar=False).reshape(inputs, inputs))
    np.fill_diagonal(corr, 1.0)
    w, v = np.linalg.eigh(corr)
    mix = v * np.sqrt(np.clip(w, 0.0, None))
    paths = -(-sims // WINDOWS)

    # The fit's scatter: refit on references simulated from it, then reflect about it (2 fit - refit).
    span = sfft.next_fast_len(n + 2 * SEPARATION)
    n_draws = max(1, min(DRAWS, paths // 2))
    z1 = _gaussian_paths(rng, [_transfer(p[None, :], span) for p in phis], n_draws, mix, span)[:, :, :n]
    draws = []
    for f, p in enumerate(phis):
        if len(p) == 0:  # white noise: nothing to refit
            draws.append(np.zeros((n_draws, 0)))
            continue
        scores = _normal_scores(_codes_of(z1[f], sorted_codes[:, f]), levels[f])
        refit = _yule_walker(_acov_rows(scores, len(p)), len(p))
        draws.append(_stationary(2 * p[None, :] - refit))

    # Each path: the reference, then WINDOWS recent windows, SEPARATION sessions apart (and around the
    # circle from the last back to the reference).
    step = length + SEPARATION
    span = sfft.next_fast_len(n + SEPARATION + WINDOWS * step)
    cycle = np.arange(paths) % n_draws  # the draw each path uses
    z2 = _gaussian_paths(rng, [_transfer(d, span)[cycle] for d in draws], paths, mix, span)
    starts = n + SEPARATION + step * np.arange(WINDOWS)
    out = np.empty((paths, WINDOWS, inputs))
    for f in range(inputs):
        recent = z2[f][:, starts[:, None] + np.arange(length)]  # [paths, WINDOWS, length]
        out[:, :, f] = _psi_codes(
            _codes_of(z2[f, :, :n], sorted_codes[:, f]), _codes_of(recent, sorted_codes[:, f]), int(levels[f])
        )
    return out.reshape(paths * WINDOWS, inputs)[:sims]


def family_limits(null: np.ndarray, alpha: float = FAMILY_ALPHA) -> np.ndarray:
    """Per column of `null` [sims, F]: the PSI to exceed, the same upper order statistic r + 1 for every
    column, r the largest for which at most `alpha` of the simulated rows exceed any column's limit
    computed without that row (so a new row, exchangeable with them, does so with probability <= alpha)."""
    sims, inputs = null.shape
    ordered = np.sort(null, axis=0)
    at_least = sims - np.column_stack(
        [np.searchsorted(ordered[:, f], null[:, f], side="left") for f in range(inputs)]
    )  # per row and column: how many rows are >= it, itself included
    # Row k exceeds the (r + 1)-th largest of the other rows in some column iff min_f at_least - 1 <= r.
    beyond = np.cumsum(np.bincount(at_least.min(axis=1) - 1, minlength=sims))
    allowed = np.flatnonzero(beyond <= alpha * sims)
    if allowed.size == 0:
        return np.full(inputs, np.inf)
    return ordered[sims - 1 - int(allowed[-1])]


# Limits by (ticker, reference digest, length, sims): the reference window stays the same night after
# night, and the dashboard recomputes the decay check on every page run.
_LIMITS: dict[tuple, np.ndarray] = {}


def null_limits(ticker: str, reference: np.ndarray, length: int, sims: int = SIMULATIONS) -> np.ndarray:
    """Per reference column: the PSI a recent window of `length` must exceed to be unusual (family
    FAMILY_ALPHA). Seeded by the ticker, so the same windows always give the same limits."""
    ref = np.ascontiguousarray(reference, dtype=np.float64)
    key = (ticker, hashlib.blake2b(ref.tobytes(), digest_size=16).digest(), ref.shape, length, sims)
    if key not in _LIMITS:
        if len(_LIMITS) >= 1024:
            _LIMITS.clear()
        rng = np.random.default_rng([SEED, zlib.crc32(ticker.encode())])
        _LIMITS[key] = family_limits(null_psi(ref, length, rng, sims))
    return _LIMITS[key].copy()


# What the check cannot see, said once wherever drift is shown (benchmarks/psi_null.py, docs/performance.md).
BLIND_SPOTS = (
    "PSI compares where each input sits in its own distribution, so it cannot see a price level's move on "
    "the model's inputs (each window is rescaled to its own range: a jump of three days' volatility is "
    "flagged on 2.5 % of tickers, as unchanged ones are), and it rarely sees a shift in a very persistent "
    "input (3 sd in 3 of 11 inputs: every ticker flagged at persistence 0.9, 15 % at 0.98)"
)


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
    # Per input: the PSI beyond which it is unusual (FAMILY_ALPHA across the inputs); empty: the
    # reference is shorter than MIN_REFERENCE rows.
    limits: dict[str, float] = field(default_factory=dict)

    @property
    def unusual(self) -> list[str]:
        """Inputs whose PSI is beyond its limit: on a ticker whose inputs did not change, any shows up at
        most FAMILY_ALPHA (5 %) of the time."""
        return [f for f, v in self.values.items() if f in self.limits and v > self.limits[f]]

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
        """The calibrated answer first (inputs beyond what unchanged inputs show); the largest PSI beside it,
        without the usual bands' word, which assumes independent draws (on these persistent inputs an
        unchanged ticker's PSI is often 'significant': issue 62 found every ridge champion so)."""
        if not self.values:
            return f"{self.ticker}: PSI not computed ({self.reason})"
        beyond = ", ".join(self.unusual) or "none"
        return (
            f"{self.ticker}: inputs beyond what unchanged inputs show (family {FAMILY_ALPHA:.0%}): {beyond}; "
            f"largest PSI {self.max_psi:.3f} ({self.max_feature})"
            + (f" (reference up to {self.reference_end})" if self.reference_end else "")
        )


def feature_drift(
    ticker: str,
    reference: pd.DataFrame,
    recent: pd.DataFrame,
    min_recent: int = 20,
    sims: int = SIMULATIONS,
) -> FeatureDrift:
    """PSI of every column of `recent` against `reference` (same columns, model-input basis or raw), and
    each column's limit from `sims` simulated pairs (`null_limits`)."""
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
    values = {c: psi(reference[c].to_numpy(), recent[c].to_numpy()) for c in reference.columns}
    limits = {}
    ref = reference.to_numpy(dtype=np.float64)
    ref = ref[np.isfinite(ref).all(axis=1)]
    if len(ref) >= MIN_REFERENCE:
        limits = dict(
            zip(reference.columns, map(float, null_limits(ticker, ref, len(recent), sims)), strict=True)
        )
    return FeatureDrift(
        ticker,
        values,
        len(reference),
        len(recent),
        recent_start=recent.index[0],
        recent_end=recent.index[-1],
        limits=limits,
    )
