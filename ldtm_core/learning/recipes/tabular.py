"""Tabular recipes: ridge (scikit-learn) and LightGBM fitted on a panel of many tickers' point-in-time
features (`price_features`), predicting each horizon's log return ln(close on its target date / close).

A row is one (ticker, date): its features read only bars up to that date, its targets only that
ticker's later closes, so targets are labels and never features. scikit-learn and LightGBM are imported
only inside the functions that fit or rebuild a model: the Dagster code server imports this without them.
Artifacts (save/load) are JSON data, never code: see `artifacts.py`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from ldtm_core.data import price_features
from ldtm_core.data.calendar import target_dates
from ldtm_core.errors import InputError, LDTMError, summary
from ldtm_core.horizons import HORIZONS
from ldtm_core.learning.recipes.family import (  # noqa: F401
    TARGET_DEFINITION,
    Family,
    RecipeConfig,
    family,
    inputs_of,
)

KINDS = ("ridge", "lightgbm")


def target_columns() -> list[str]:
    """The target columns, in HORIZONS order (the order of every prediction's columns)."""
    return [f"target_{h.name}" for h in HORIZONS]


def _days(dates: pd.Series) -> np.ndarray:
    return pd.DatetimeIndex(pd.to_datetime(dates, errors="coerce")).values.astype("datetime64[D]")


def panel_targets(bars: pd.DataFrame) -> pd.DataFrame:
    """Per row of `bars` (columns ticker, date, close): `ticker`, `date`, then `target_{h.name}` for
    each horizon, the log return from the row's close to the same ticker's close on the horizon's target
    date; NaN where that ticker has no bar on that date (yet). Index and row order are the input's."""
    missing = [c for c in ("ticker", "date", "close") if c not in bars.columns]
    if missing:
        raise InputError(f"panel targets: bars lack column(s) {', '.join(map(repr, missing))}")
    close = pd.to_numeric(bars["close"], errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
    if not (np.isfinite(close) & (close > 0)).all():
        raise InputError("panel targets: column 'close' must hold positive numbers only")
    days = _days(bars["date"])
    if np.isnat(days).any():
        raise InputError("panel targets: column 'date' holds a value that is not a date")
    codes, _ = pd.factorize(bars["ticker"], use_na_sentinel=False)
    # One sortable int64 key per (ticker, day), so a target is looked up in its own ticker's bars only.
    ticker_part = codes.astype(np.int64) << 32

    def key(d: np.ndarray) -> np.ndarray:
        return ticker_part + d.astype(np.int64) + (1 << 31)  # days before 1970 are negative

    row_keys = key(days)
    order = np.argsort(row_keys, kind="stable")
    sorted_keys = row_keys[order]
    if (dup := np.flatnonzero(sorted_keys[1:] == sorted_keys[:-1])).size:
        first = order[dup[0]]
        raise InputError(
            f"panel targets: ticker {bars['ticker'].iloc[first]!r} has two bars on {days[first]}"
        )

    out = pd.DataFrame({"ticker": bars["ticker"].array, "date": bars["date"].array}, index=bars.index)
    when_by_name = target_dates(days)
    for h in HORIZONS:
        when = when_by_name[h.name]
        known = ~np.isnat(when)  # NaT: past the calendar's end
        want = key(np.where(known, when, days))
        pos = np.searchsorted(sorted_keys, want)
        hit = known & (pos < len(sorted_keys))
        hit[hit] = sorted_keys[pos[hit]] == want[hit]
        target_close = np.full(len(close), np.nan)
        target_close[hit] = close[order[pos[hit]]]
        out[f"target_{h.name}"] = np.log(target_close / close)
    return out


def training_frame(
    bars: pd.DataFrame, cfg: RecipeConfig | None = None, context: dict | None = None
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """(X, Y, keys) from a panel of bars: recipe `cfg`'s inputs (`price_features` without one; `context`:
    its context tickers' arrays), targets (`panel_targets`) and their (ticker, date), row for row, keeping
    only rows where every input and target is known (no warm-up, no target still ahead). All three share
    a fresh RangeIndex."""
    x = inputs_of(cfg).frame(bars, cfg, context)
    targets = panel_targets(bars)
    y = targets[target_columns()]
    complete = np.isfinite(x.to_numpy()).all(axis=1) & np.isfinite(y.to_numpy()).all(axis=1)
    keys = targets.loc[complete, ["ticker", "date"]].reset_index(drop=True)
    return x[complete].reset_index(drop=True), y[complete].reset_index(drop=True), keys


LIGHTGBM_DEVICES = ("cpu", "gpu", "cuda")
# Settings checked before a fit: whole numbers with their least value, and numbers with their range
# (low, high, whether low itself is allowed).
WHOLE_SETTINGS = {
    "num_leaves": 2,
    "n_estimators": 1,
    "min_child_samples": 1,
    "subsample_freq": 0,
    "num_threads": 1,
}
RANGE_SETTINGS = {
    "alpha": (0.0, 1e12, True),
    "learning_rate": (0.0, 1.0, False),
    "subsample": (0.0, 1.0, False),
    "colsample_bytree": (0.0, 1.0, False),
}


@dataclass(frozen=True)
class TabularConfig(RecipeConfig):
    """Ridge's and LightGBM's settings. Ridge reads `alpha`; LightGBM the rest (named as LGBMRegressor's)."""

    kind: str = "ridge"
    alpha: float = 1.0
    num_leaves: int = 15
    learning_rate: float = 0.05
    n_estimators: int = 200
    min_child_samples: int = 50
    subsample: float = 0.8
    subsample_freq: int = 1  # LightGBM bags rows only when this is positive
    colsample_bytree: float = 0.8
    deterministic: bool = True
    num_threads: int = 1
    # LightGBM's device_type: "gpu" (OpenCL) or "cuda" where the installed build has them; not tested
    # here (no GPU). Ridge runs on the CPU whatever this says.
    device: str = "cpu"
    # The `price_features` it reads, recorded with the model: a feature added to the library later is
    # the next fit's, never a stored model's (`--set features=ret_1,vol_20` chooses some).
    features: tuple[str, ...] = field(default_factory=price_features.feature_names)

    def __post_init__(self):
        if self.kind not in KINDS:
            raise InputError(f"tabular recipe kind {self.kind!r} is not one of {', '.join(KINDS)}")
        self.check_settings()

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TabularConfig:
        # Stored before models recorded their features: they read the library as first released.
        return super().from_dict({"features": price_features.FIRST_LIBRARY, **d})

    def check_settings(self) -> None:
        """Refuse a bad setting by its `--set` name before any data is read (the libraries would refuse
        it only at fit time, in their own words, or not at all)."""
        for name, low in WHOLE_SETTINGS.items():
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise InputError(f"{self.kind}: --set {name} must be a whole number >= {low}, got {value!r}")
        for name, (low, high, low_allowed) in RANGE_SETTINGS.items():
            value = getattr(self, name)
            number = isinstance(value, int | float) and not isinstance(value, bool)
            if not (number and (value >= low if low_allowed else value > low) and value <= high):
                where = f"{'[' if low_allowed else '('}{low:g}, {high:g}]"
                raise InputError(f"{self.kind}: --set {name} must be in {where}, got {value!r}")
        if self.device not in LIGHTGBM_DEVICES:
            raise InputError(
                f"{self.kind}: device must be one of {', '.join(LIGHTGBM_DEVICES)}, got {self.device!r}"
            )
        object.__setattr__(self, "features", tuple(self.features))  # a stored list reads as the tuple
        if not self.features or len(set(self.features)) != len(self.features):
            raise InputError(
                f"{self.kind}: --set features needs distinct feature names, got {self.features!r}"
            )
        price_features.definitions(self.features)  # an unknown one is refused by name

    def lightgbm_params(self) -> dict[str, Any]:
        """The booster's parameters under LightGBM's canonical names (aliases would warn)."""
        return {
            "objective": "regression",
            "num_leaves": self.num_leaves,
            "learning_rate": self.learning_rate,
            "min_data_in_leaf": self.min_child_samples,
            "bagging_fraction": self.subsample,
            "bagging_freq": self.subsample_freq,
            "feature_fraction": self.colsample_bytree,
            "seed": self.seed,
            "deterministic": self.deterministic,
            # Row-wise histograms, chosen up front: the automatic choice is timed, hence not reproducible.
            "force_row_wise": True,
            "num_threads": self.num_threads,
            "verbosity": -1,
            **({"device_type": self.device} if self.device != "cpu" else {}),
        }


@dataclass
class TabularModel:
    """A fitted global recipe: its config and the state its family fitted (ridge: the scikit-learn
    Pipeline, all horizons at once; LightGBM: one Booster per horizon, in HORIZONS order)."""

    config: RecipeConfig
    estimator: Any
    features: tuple[str, ...] = field(default_factory=price_features.feature_names)

    @property
    def kind(self) -> str:
        return self.config.kind

    @property
    def signature(self) -> str:
        return self.config.signature

    def predict(self, x: pd.DataFrame | np.ndarray) -> np.ndarray:
        """Log returns [n, len(HORIZONS)] for feature rows `x` (columns `features`, or an array in
        their order). Raises InputError naming the recipe when its output is not that, or not finite, or
        when its family's predict raises (a plugin's code: every caller then fails its model alone)."""
        values = as_matrix(x, self.features, f"{self.kind} predict: X")
        n, width = len(values), len(HORIZONS)
        if n == 0:
            return np.empty((0, width))
        try:
            out = np.asarray(family(self.kind).predict(self.estimator, values, self.config), dtype=np.float64)
        except LDTMError:
            raise
        except Exception as exc:  # noqa: BLE001 - the family's own failure, said as the recipe's
            raise InputError(f"{self.kind} predict raised {summary(exc)}") from exc
        if out.shape != (n, width):
            raise InputError(f"{self.kind} predicted shape {out.shape}, expected ({n}, {width})")
        bad = int((~np.isfinite(out)).sum())
        if bad:
            raise InputError(f"{self.kind} predicted {bad} non-finite value(s) (NaN/inf) of {out.size}")
        return out


def as_matrix(data: pd.DataFrame | np.ndarray, columns: list[str] | tuple[str, ...], what: str) -> np.ndarray:
    """float64 [n, len(columns)] from a frame holding `columns` (taken in that order) or an array
    already in it; every value finite (training drops incomplete rows, so a model has never seen NaN)."""
    if isinstance(data, pd.DataFrame):
        missing = [c for c in columns if c not in data.columns]
        if missing:
            raise InputError(
                f"{what} lacks column(s) {', '.join(missing[:5])}{' …' if len(missing) > 5 else ''}"
            )
        values = data[list(columns)].to_numpy(dtype=np.float64)
    else:
        values = np.asarray(data, dtype=np.float64)
        if values.ndim != 2 or values.shape[1] != len(columns):
            raise InputError(f"{what} has shape {values.shape}, expected (n, {len(columns)})")
    bad = int((~np.isfinite(values)).sum())
    if bad:
        raise InputError(f"{what} holds {bad} non-finite value(s) (NaN/inf)")
    return values


def fit(x: pd.DataFrame | np.ndarray, y: pd.DataFrame | np.ndarray, cfg: RecipeConfig) -> TabularModel:
    """Fit `cfg`'s recipe on inputs `x` (its `inputs.names(cfg)`) and targets `y` (`target_columns()`),
    as `training_frame` returns them."""
    features = inputs_of(cfg).names(cfg)
    xs = as_matrix(x, features, f"{cfg.kind} fit: X")
    ys = as_matrix(y, target_columns(), f"{cfg.kind} fit: Y")
    if len(xs) != len(ys) or len(xs) < 2:
        raise InputError(f"{cfg.kind} fit: X has {len(xs)} rows and Y {len(ys)}; need equal, at least 2")
    try:
        state = family(cfg.kind).fit(xs, ys, cfg)
    except LDTMError:
        raise
    except Exception as exc:  # noqa: BLE001 - the family's own failure, said as the recipe's
        raise InputError(f"recipe {cfg.kind}: {summary(exc)}") from exc
    return TabularModel(config=cfg, estimator=state, features=features)


# --- the two built-in families ------------------------------------------------------------------------


def _fit_ridge(xs: np.ndarray, ys: np.ndarray, cfg: TabularConfig):
    from sklearn.linear_model import Ridge
    from sklearn.pipeline import Pipeline
    from sklearn.preprocessing import StandardScaler

    # Scaled first: the penalty then weighs every feature alike whatever its units.
    return Pipeline([("scale", StandardScaler()), ("ridge", Ridge(alpha=cfg.alpha))]).fit(xs, ys)


def _dump_ridge(estimator) -> dict[str, Any]:
    scaler, ridge = estimator.named_steps["scale"], estimator.named_steps["ridge"]
    return {
        "scaler": {
            "mean": scaler.mean_.tolist(),
            "scale": scaler.scale_.tolist(),
            "var": scaler.var_.tolist(),
        },
        "ridge": {"coef": ridge.coef_.tolist(), "intercept": ridge.intercept_.tolist()},
    }


def _array(values, shape: tuple[int, ...], what: str) -> np.ndarray:
    out = np.asarray(values, dtype=np.float64)
    if out.shape != shape:
        raise ValueError(f"{what} has shape {out.shape}, expected {shape}")
    return out


def _load_ridge(payload: dict, cfg: TabularConfig, n_features: int):
    from sklearn.linear_model import Ridge
    from sklearn.pipeline import Pipeline
    from sklearn.preprocessing import StandardScaler

    # The fitted attributes scikit-learn's own transform and predict read, restored as fit left them.
    scaler = StandardScaler()
    scaler.mean_ = _array(payload["scaler"]["mean"], (n_features,), "scaler mean")
    scaler.scale_ = _array(payload["scaler"]["scale"], (n_features,), "scaler scale")
    scaler.var_ = _array(payload["scaler"]["var"], (n_features,), "scaler var")
    scaler.n_features_in_ = n_features
    ridge = Ridge(alpha=cfg.alpha)
    ridge.coef_ = _array(payload["ridge"]["coef"], (len(HORIZONS), n_features), "ridge coef")
    ridge.intercept_ = _array(payload["ridge"]["intercept"], (len(HORIZONS),), "ridge intercept")
    ridge.n_features_in_ = n_features
    return Pipeline([("scale", scaler), ("ridge", ridge)])


def _fit_lightgbm(xs: np.ndarray, ys: np.ndarray, cfg: TabularConfig):
    import lightgbm

    params, names = cfg.lightgbm_params(), list(inputs_of(cfg).names(cfg))
    return tuple(
        lightgbm.train(
            params,
            lightgbm.Dataset(xs, label=ys[:, j], feature_name=names, params=params),
            num_boost_round=cfg.n_estimators,
        )
        for j in range(len(HORIZONS))
    )


def _predict_lightgbm(boosters, xs: np.ndarray, cfg: TabularConfig) -> np.ndarray:
    columns = []
    for h, booster in zip(HORIZONS, boosters, strict=True):
        col = np.asarray(booster.predict(xs, num_threads=cfg.num_threads), np.float64)
        if col.shape != (len(xs),):
            raise InputError(f"lightgbm predicted shape {col.shape} for {h.name}, expected ({len(xs)},)")
        columns.append(col)
    return np.column_stack(columns)


def _dump_lightgbm(boosters) -> dict[str, Any]:
    return {"boosters": {h.name: b.model_to_string() for h, b in zip(HORIZONS, boosters, strict=True)}}


def _load_lightgbm(payload: dict, cfg: TabularConfig, n_features: int):
    import lightgbm

    features = list(inputs_of(cfg).names(cfg))
    texts = payload["boosters"]
    if sorted(texts) != sorted(h.name for h in HORIZONS):
        raise ValueError(f"boosters for {sorted(texts)}, expected one per horizon")
    boosters = []
    for h in HORIZONS:
        if not isinstance(texts[h.name], str):
            raise ValueError(f"the {h.name} booster is not LightGBM model text")
        booster = lightgbm.Booster(model_str=texts[h.name])
        if booster.feature_name() != features:
            raise ValueError(f"the {h.name} booster reads features {booster.feature_name()[:3]}…")
        boosters.append(booster)
    return tuple(boosters)


RIDGE = Family(
    TabularConfig,
    _fit_ridge,
    lambda estimator, xs, cfg: estimator.predict(xs),
    _dump_ridge,
    _load_ridge,
    libraries=("scikit-learn",),
)
LIGHTGBM = Family(
    TabularConfig, _fit_lightgbm, _predict_lightgbm, _dump_lightgbm, _load_lightgbm, libraries=("lightgbm",)
)
