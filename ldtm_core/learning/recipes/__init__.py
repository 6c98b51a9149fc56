"""Recipes: a model family with its config, the unit LDTM trains, serves and judges.

`lstm` is the per-ticker network (learning.training, learning.backtest). The others are global: fitted
once on every member ticker's rows (`global_fit`), stored as one data artifact, and registered per
ticker, so the registry still says per ticker which model serves. A registry row names its recipe in
its config JSON (`"recipe"`); a row without one is the LSTM (every row written before recipes existed).

A recipe ships with LDTM (`catalog.BUILTIN`) or comes from a package of its own, installed beside it
(`plugins`: the `ldtm.recipes` entry point group; docs/bring-your-own-model.md). The plugins are found
once per process, at the first read of `RECIPES`, and join it; one that breaks the contract is refused
alone, by name (`plugins.refused()`), and never stops an import or a read.

This module stays import-light (no torch, scikit-learn or LightGBM): the registry reads it.
"""

from __future__ import annotations

import json

from ldtm_core.learning.recipes import plugins
from ldtm_core.learning.recipes.catalog import (  # noqa: F401  (the registry, read from here)
    BUILTIN,
    LSTM,
    RECIPES,
    REFUSED,
    Recipe,
    get,
)

RECIPE_KEY = "recipe"  # the key of a registry row's config JSON that names its recipe


def recipe_of(config_json: str) -> str:
    """The recipe a registry row's stored config names (`lstm` when it names none)."""
    config = json.loads(config_json)
    return str(config.get(RECIPE_KEY, LSTM)) if isinstance(config, dict) else LSTM


def global_recipes() -> list[str]:
    """The recipes fitted once for the universe, in registry order."""
    return [r.name for r in RECIPES.values() if r.scope == "global"]


def challenger_recipes() -> list[str]:
    """LDTM_CHALLENGER_RECIPES: the global recipes the weekly loop fits as challengers; ConfigError naming
    the setting for one that is unknown or fitted per ticker."""
    from ldtm_core.config import setting_text
    from ldtm_core.errors import ConfigError

    names = [n.strip() for n in (setting_text("LDTM_CHALLENGER_RECIPES") or "").split(",") if n.strip()]
    wrong = [n for n in names if n not in global_recipes()]
    if wrong:
        raise ConfigError(
            f"LDTM_CHALLENGER_RECIPES: {', '.join(map(repr, wrong))} not a global recipe; global: "
            f"{', '.join(global_recipes())}"
        )
    return list(dict.fromkeys(names))


RECIPES.discover_with(plugins.install)  # at the first read: a plugin's module imports this package first
