"""Global recipes' models as data: one JSON file (format "ldtm-tabular"), written atomically and loaded
only after its sha256 matches the registry's. It is parsed as JSON and nothing else (no pickle, no
joblib), so a file can hold numbers and a library's own model text but never code to run: the recipe's
family (`family.Family`) dumps its fitted state as JSON data and rebuilds it from that data.

Ridge is stored as the fitted scaler's and Ridge's arrays and rebuilt as the same scikit-learn objects,
so prediction stays scikit-learn's; LightGBM as each horizon's `Booster.model_to_string()`.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from ldtm_core.errors import CheckpointError, first_line
from ldtm_core.horizons import HORIZONS
from ldtm_core.learning.checkpoints import write_atomic
from ldtm_core.learning.recipes import RECIPES, REFUSED
from ldtm_core.learning.recipes.family import family, inputs_of
from ldtm_core.learning.recipes.tabular import TabularModel

FORMAT = "ldtm-tabular"
VERSION = 1


def to_document(model: TabularModel) -> dict[str, Any]:
    """The artifact's JSON object: the recipe's config and its family's `dump` of the fitted state."""
    return {
        "format": FORMAT,
        "version": VERSION,
        "kind": model.kind,
        "config": model.config.to_dict(),
        "features": list(model.features),
        "features_fingerprint": inputs_of(model.config).fingerprint(model.config),
        "horizons": [h.name for h in HORIZONS],
        "payload": family(model.kind).dump(model.estimator),
    }


def save(model: TabularModel, path: Path | str) -> str:
    """Write `model` as one JSON file, atomically; returns its sha256 (for the registry)."""
    # allow_nan=False: the file stays strict JSON, and a model with NaN weights is refused here.
    text = json.dumps(to_document(model), sort_keys=True, indent=1, allow_nan=False, ensure_ascii=True)
    return write_atomic(Path(path), text.encode("ascii"))


def _refuse_constant(name: str):
    raise ValueError(f"{name} is not a JSON number")


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
    known = [r.name for r in RECIPES.values() if r.family]
    if kind not in known:
        refused = (
            f"; its plugin was refused: {REFUSED[kind]}" if isinstance(kind, str) and kind in REFUSED else ""
        )
        raise CheckpointError(f"{who} has unknown kind {kind!r} (known: {', '.join(known)}){refused}")
    horizons = [h.name for h in HORIZONS]
    if doc.get("horizons") != horizons:
        raise CheckpointError(f"{who} predicts horizons {doc.get('horizons')}, not {horizons}")
    try:
        if doc["config"].get("kind") != kind:
            raise ValueError(f"its config says kind {doc['config'].get('kind')!r}")
        fam = family(kind)
        cfg = fam.config.from_dict(doc["config"])
    except Exception as exc:  # a missing key, an unknown field
        raise CheckpointError(f"{who} is inconsistent: {first_line(exc) or type(exc).__name__}") from None
    current = fam.inputs.fingerprint(cfg)
    features = list(fam.inputs.names(cfg))
    if doc.get("features_fingerprint") != current or doc.get("features") != features:
        raise CheckpointError(
            f"{who} was fitted on other feature definitions (fingerprint "
            f"{str(doc.get('features_fingerprint'))[:12]}…, current {current[:12]}…): stale, refit it"
        )
    try:
        estimator = fam.load(doc["payload"], cfg, len(features))
    except Exception as exc:  # a missing key, a wrong shape, LightGBM refusing its model text
        raise CheckpointError(f"{who} is inconsistent: {first_line(exc) or type(exc).__name__}") from None
    return TabularModel(config=cfg, estimator=estimator, features=tuple(features))
