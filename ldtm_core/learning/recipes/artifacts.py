"""Tabular models as data: one JSON file (format "ldtm-tabular"), written atomically and loaded only
after its sha256 matches the registry's. It is parsed as JSON and nothing else (no pickle, no joblib),
so a file can hold numbers and LightGBM's own model text but never code to run.

Ridge is stored as the fitted scaler's and Ridge's arrays and rebuilt as the same scikit-learn objects,
so prediction stays scikit-learn's; LightGBM as each horizon's `Booster.model_to_string()`.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np

from ldtm_core.data import price_features
from ldtm_core.errors import CheckpointError
from ldtm_core.horizons import HORIZONS
from ldtm_core.learning.checkpoints import write_atomic
from ldtm_core.learning.recipes.tabular import KINDS, TabularConfig, TabularModel

FORMAT = "ldtm-tabular"
VERSION = 1


def _ridge_payload(model: TabularModel) -> dict[str, Any]:
    scaler, ridge = model.estimator.named_steps["scale"], model.estimator.named_steps["ridge"]
    return {
        "scaler": {
            "mean": scaler.mean_.tolist(),
            "scale": scaler.scale_.tolist(),
            "var": scaler.var_.tolist(),
        },
        "ridge": {"coef": ridge.coef_.tolist(), "intercept": ridge.intercept_.tolist()},
    }


def _lightgbm_payload(model: TabularModel) -> dict[str, Any]:
    boosters = zip(HORIZONS, model.estimator, strict=True)
    return {"boosters": {h.name: booster.model_to_string() for h, booster in boosters}}


def to_document(model: TabularModel) -> dict[str, Any]:
    """The artifact's JSON object."""
    payload = _ridge_payload(model) if model.kind == "ridge" else _lightgbm_payload(model)
    return {
        "format": FORMAT,
        "version": VERSION,
        "kind": model.kind,
        "config": model.config.to_dict(),
        "features": list(model.features),
        "features_fingerprint": price_features.fingerprint(),
        "horizons": [h.name for h in HORIZONS],
        "payload": payload,
    }


def save(model: TabularModel, path: Path | str) -> str:
    """Write `model` as one JSON file, atomically; returns its sha256 (for the registry)."""
    # allow_nan=False: the file stays strict JSON, and a model with NaN weights is refused here.
    text = json.dumps(to_document(model), sort_keys=True, indent=1, allow_nan=False, ensure_ascii=True)
    return write_atomic(Path(path), text.encode("ascii"))


def _refuse_constant(name: str):
    raise ValueError(f"{name} is not a JSON number")


def _array(values, shape: tuple[int, ...], what: str) -> np.ndarray:
    out = np.asarray(values, dtype=np.float64)
    if out.shape != shape:
        raise ValueError(f"{what} has shape {out.shape}, expected {shape}")
    return out


def _rebuild_ridge(cfg: TabularConfig, payload: dict, n_features: int):
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


def _rebuild_lightgbm(payload: dict, features: list[str]):
    import lightgbm

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


def load(path: Path | str, expected_sha256: str) -> TabularModel:
    """The model saved at `path`, once its sha256 is `expected_sha256`. Raises CheckpointError naming
    the file when it is missing, altered, not this format, of an unknown kind or version, or fitted on
    feature definitions other than the current library's (stale: refit it)."""
    path = Path(path)
    who = f"tabular model {path}"
    if not path.is_file():
        raise CheckpointError(f"{who} is missing")
    data = path.read_bytes()  # hashed and parsed from these same bytes: no swap in between
    digest = hashlib.sha256(data).hexdigest()
    if digest != expected_sha256:
        raise CheckpointError(
            f"{who} does not match the registry: sha256 {digest[:12]}… != {str(expected_sha256)[:12]}…"
        )
    try:
        doc = json.loads(data.decode("utf-8"), parse_constant=_refuse_constant)
    except (UnicodeDecodeError, ValueError) as exc:
        raise CheckpointError(f"{who} is not an {FORMAT} JSON file: {str(exc).splitlines()[0]}") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        found = doc.get("format") if isinstance(doc, dict) else type(doc).__name__
        raise CheckpointError(f"{who} is not an {FORMAT} file (format {found!r})")
    if doc.get("version") != VERSION:
        raise CheckpointError(f"{who} has version {doc.get('version')!r}; this code reads version {VERSION}")
    kind = doc.get("kind")
    if kind not in KINDS:
        raise CheckpointError(f"{who} has unknown kind {kind!r} (known: {', '.join(KINDS)})")
    current = price_features.fingerprint()
    features = list(price_features.feature_names())
    if doc.get("features_fingerprint") != current or doc.get("features") != features:
        raise CheckpointError(
            f"{who} was fitted on other feature definitions (fingerprint "
            f"{str(doc.get('features_fingerprint'))[:12]}…, current {current[:12]}…): stale, refit it"
        )
    horizons = [h.name for h in HORIZONS]
    if doc.get("horizons") != horizons:
        raise CheckpointError(f"{who} predicts horizons {doc.get('horizons')}, not {horizons}")
    try:
        cfg = TabularConfig.from_dict(doc["config"])
        if cfg.kind != kind:
            raise ValueError(f"its config says kind {cfg.kind!r}")
        if kind == "ridge":
            estimator = _rebuild_ridge(cfg, doc["payload"], len(features))
        else:
            estimator = _rebuild_lightgbm(doc["payload"], features)
    except Exception as exc:  # a missing key, a wrong shape, LightGBM refusing its model text
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CheckpointError(f"{who} is inconsistent: {first}") from None
    return TabularModel(config=cfg, estimator=estimator, features=tuple(features))
