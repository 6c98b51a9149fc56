"""k-nearest neighbours regression (scikit-learn) on standardised price_features: an LDTM recipe.

Each evening's forecast is the mean of the log returns that followed the `k` training rows whose
standardised price features were nearest. The fitted state is the standardisation and those rows and
their targets (at most `max_rows`, drawn with the seed), stored as JSON numbers: an artifact is data.
scikit-learn is imported only inside the functions that fit or rebuild the regressor, so LDTM's discovery
(which imports this module) stays light.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ldtm_core.data import price_features
from ldtm_core.errors import InputError
from ldtm_core.horizons import HORIZONS
from ldtm_core.learning.recipes.family import Family, RecipeConfig
from ldtm_core.learning.recipes.inputs import PRICE_FEATURES

WEIGHTS = ("uniform", "distance")


@dataclass(frozen=True)
class KNNConfig(RecipeConfig):
    """`ldtm train --recipe knn --set k=20 --set weights=distance`."""

    kind: str = "knn"
    k: int = 50  # neighbours averaged
    weights: str = "uniform"  # or "distance": nearer neighbours weigh more
    max_rows: int = 5000  # training rows kept (drawn with the seed): the artifact's size
    # The price features it reads, recorded with the model (a feature added to the library later is the
    # next fit's, never a stored model's).
    features: tuple[str, ...] = field(default_factory=price_features.feature_names)

    def __post_init__(self):
        for name in ("k", "max_rows"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise InputError(f"knn: --set {name} must be a whole number >= 1, got {value!r}")
        if self.weights not in WEIGHTS:
            raise InputError(f"knn: --set weights must be one of {', '.join(WEIGHTS)}, got {self.weights!r}")
        object.__setattr__(self, "features", tuple(self.features))  # a stored list reads as the tuple
        if not self.features or len(set(self.features)) != len(self.features):
            raise InputError(f"knn: --set features needs distinct feature names, got {self.features!r}")
        price_features.definitions(self.features)  # an unknown one is refused by name


@dataclass
class KNNState:
    mean: np.ndarray  # [n_features]: the standardisation
    scale: np.ndarray  # [n_features]
    rows: np.ndarray  # [m, n_features], standardised
    targets: np.ndarray  # [m, len(HORIZONS)]
    regressor: Any  # KNeighborsRegressor fitted on rows -> targets


def sample(n: int, cfg: KNNConfig) -> np.ndarray:
    """The training rows kept: all of them up to `max_rows`, else `max_rows` drawn with the seed (sorted)."""
    if n <= cfg.max_rows:
        return np.arange(n)
    return np.sort(np.random.default_rng(cfg.seed).choice(n, cfg.max_rows, replace=False))


def _regressor(rows: np.ndarray, targets: np.ndarray, cfg: KNNConfig):
    from sklearn.neighbors import KNeighborsRegressor

    # Brute force: exact and deterministic (no tree built on the ties' order).
    model = KNeighborsRegressor(n_neighbors=min(cfg.k, len(rows)), weights=cfg.weights, algorithm="brute")
    return model.fit(rows, targets)


def fit(x: np.ndarray, y: np.ndarray, cfg: KNNConfig) -> KNNState:
    """x [n, features], y [n, horizons] log returns -> the state."""
    mean = x.mean(axis=0)
    scale = x.std(axis=0)
    scale[scale == 0] = 1.0  # a constant feature: centred, not divided by zero
    keep = sample(len(x), cfg)
    rows = (x[keep] - mean) / scale
    targets = np.ascontiguousarray(y[keep])
    return KNNState(mean, scale, rows, targets, _regressor(rows, targets, cfg))


def predict(state: KNNState, x: np.ndarray, cfg: KNNConfig) -> np.ndarray:
    """-> [n, horizons] log returns: the mean of the nearest training rows' targets."""
    return state.regressor.predict((x - state.mean) / state.scale)


def dump(state: KNNState) -> dict:
    """The state as JSON data: numbers in lists, never code."""
    return {
        "mean": state.mean.tolist(),
        "scale": state.scale.tolist(),
        "rows": state.rows.tolist(),
        "targets": state.targets.tolist(),
    }


def _array(values, shape: tuple[int | None, ...], what: str) -> np.ndarray:
    out = np.asarray(values, dtype=np.float64)
    if out.ndim != len(shape) or any(s is not None and s != n for s, n in zip(shape, out.shape, strict=True)):
        raise ValueError(f"{what} has shape {out.shape}, expected {shape}")
    if not np.isfinite(out).all():
        raise ValueError(f"{what} holds a value that is not finite")
    return out


def load(data: dict, cfg: KNNConfig, n_features: int) -> KNNState:
    """The state from `dump`'s data (LDTM hands it back only once its sha256 matches the registry)."""
    mean = _array(data["mean"], (n_features,), "mean")
    scale = _array(data["scale"], (n_features,), "scale")
    rows = _array(data["rows"], (None, n_features), "rows")
    targets = _array(data["targets"], (len(rows), len(HORIZONS)), "targets")
    if not len(rows):
        raise ValueError("no training rows")
    return KNNState(mean, scale, rows, targets, _regressor(rows, targets, cfg))


KNN = Family(
    KNNConfig,
    fit,
    predict,
    dump,
    load,
    libraries=("scikit-learn",),  # its version is part of every backtest fold's key
    inputs=PRICE_FEATURES,
    doc="k-nearest neighbours (scikit-learn) on standardised price_features",
)
