"""What a global recipe is made of: its settings (`RecipeConfig`) and its family (`Family`): how it fits,
predicts and stores its fitted state. Ridge and LightGBM are two families (`tabular`); yours is a third,
in one module, registered with one line in `recipes.catalog.BUILTIN` (docs/architecture.md, "Add a
recipe") or from a package of its own through the `ldtm.recipes` entry point group (`recipes.plugins`;
docs/bring-your-own-model.md). This contract is versioned: `RECIPE_API_VERSION`.

A family reads X, its inputs' values for each (ticker, evening) (`Family.inputs`; the `price_features`
library by default), and Y, each horizon's log return to its target date. LDTM does everything else: the panel, the purge,
the folds, the artifact file (JSON data, sha256-verified, never code), the registry, the gate, serving.
"""

from __future__ import annotations

import hashlib
import importlib
import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from typing import Any, ClassVar

from ldtm_core.errors import InputError
from ldtm_core.horizons import HORIZONS
from ldtm_core.learning.recipes.catalog import RECIPES, get
from ldtm_core.learning.recipes.inputs import PRICE_FEATURES, Inputs

# What a target is: part of the signature, since a change of definition makes two fits incomparable.
TARGET_DEFINITION = "log_return(close[target_date] / close[date]), XNYS sessions"

# The version of the recipe contract (`RecipeConfig`, `Family`, `inputs.Inputs`, and what LDTM hands a
# family and expects back: docs/bring-your-own-model.md). A change that would break a recipe written for
# it is a new version; a plugin declaring a version this LDTM does not speak is refused by name.
RECIPE_API_VERSION = 1
SUPPORTED_API_VERSIONS = (1,)


@dataclass(frozen=True)
class RecipeConfig:
    """A global recipe's settings: subclass it as a frozen dataclass with a default for every field
    (`ldtm train --recipe R --set field=value` sets them). `kind` is the recipe's name; `seed` is part of
    every fold's key."""

    kind: str = ""
    seed: int = 0

    # Where a fit runs, not what it is: left out of the signature, so a GPU fit shares its fold keys
    # with the CPU fit of the same recipe (they differ by float rounding only).
    RUNTIME_FIELDS: ClassVar[tuple[str, ...]] = ("device",)
    # Signed as the inputs' fingerprint (their definitions), not as a config value: a model stored before
    # it recorded its feature list signs as it did then.
    INPUT_FIELDS: ClassVar[tuple[str, ...]] = ("features",)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RecipeConfig:
        unknown = set(d) - {f.name for f in fields(cls)}
        if unknown:
            raise InputError(f"{cls.__name__}: unknown field(s) {', '.join(sorted(unknown))}")
        return cls(**d)

    @property
    def signature(self) -> str:
        """sha256 of the config, the inputs' definitions, the horizons and the target definition as
        canonical JSON: two fits with one signature saw the same recipe on the same inputs' definitions."""
        spec = {
            "config": {
                k: v for k, v in self.to_dict().items() if k not in (*self.RUNTIME_FIELDS, *self.INPUT_FIELDS)
            },
            "features_fingerprint": inputs_of(self).fingerprint(self),
            "horizons": [h.name for h in HORIZONS],
            "targets": TARGET_DEFINITION,
        }
        blob = json.dumps(spec, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
        return hashlib.sha256(blob.encode("ascii")).hexdigest()


@dataclass(frozen=True)
class Family:
    """How one global recipe fits, predicts and stores itself. Arrays are float64; X is [n, inputs] in
    `inputs.names(config)` order, Y and predictions [n, len(HORIZONS)] in HORIZONS order."""

    config: type[RecipeConfig]
    fit: Callable[[Any, Any, Any], Any]  # (X, Y, config) -> the fitted state
    predict: Callable[[Any, Any, Any], Any]  # (state, X, config) -> predicted log returns
    dump: Callable[[Any], dict]  # state -> JSON data (numbers, strings, lists, dicts): the artifact
    load: Callable[[dict, Any, int], Any]  # (that data, config, number of features) -> the state
    libraries: tuple[str, ...] = ()  # distributions whose version is part of every fold's key
    inputs: Inputs = PRICE_FEATURES  # what X holds
    doc: str = ""  # one line for `ldtm recipes list` (a plugin's; without one, its module's docstring)
    api_version: int = RECIPE_API_VERSION  # the recipe contract it was written for


def family(name: str) -> Family:
    """The family of global recipe `name`, imported on first use (the registry names its module)."""
    recipe = get(name)  # an unknown name is refused listing every recipe
    if recipe.family is None:
        known = ", ".join(r.name for r in RECIPES.values() if r.family)
        raise InputError(f"recipe {name!r} is not a global recipe (global: {known})")
    module, _, attr = recipe.family.partition(":")
    found = getattr(importlib.import_module(module), attr, None)
    if not isinstance(found, Family):
        raise InputError(f"recipe {name!r}: {recipe.family} is not a recipes.family.Family")
    return found


def inputs_of(cfg: RecipeConfig | None) -> Inputs:
    """What recipe `cfg.kind` reads (no recipe: the `price_features` library)."""
    return PRICE_FEATURES if cfg is None else family(cfg.kind).inputs


def config_from(name: str, stored: dict[str, Any]) -> RecipeConfig:
    """Recipe `name`'s config from its stored dict (a registry row's or an artifact's JSON)."""
    return family(name).config.from_dict({**{k: v for k, v in stored.items() if k != "recipe"}, "kind": name})
