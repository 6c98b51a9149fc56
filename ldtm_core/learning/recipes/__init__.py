"""Recipes: a model family with its config, the unit LDTM trains, serves and judges.

`lstm` is the per-ticker network (learning.training, learning.backtest). The others are global: fitted
once on every member ticker's rows (`global_fit`), stored as one data artifact, and registered per
ticker, so the registry still says per ticker which model serves. A registry row names its recipe in
its config JSON (`"recipe"`); a row without one is the LSTM (every row written before recipes existed).

This module stays import-light (no torch, scikit-learn or LightGBM): the registry reads it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from ldtm_core.errors import InputError

LSTM = "lstm"
RECIPE_KEY = "recipe"  # the key of a registry row's config JSON that names its recipe
_TABULAR = "ldtm_core.learning.recipes.tabular"
_MARKET = "ldtm_core.learning.recipes.market"


@dataclass(frozen=True)
class Recipe:
    name: str
    scope: str  # "per ticker": one fit per ticker; "global": one fit for the whole universe
    doc: str
    family: str | None = None  # a global recipe's `recipes.family.Family`, as "module:attribute"


RECIPES: dict[str, Recipe] = {
    r.name: r
    for r in (
        Recipe(LSTM, "per ticker", "2-layer LSTM on each ticker's normalised 11-feature windows"),
        Recipe("ridge", "global", "ridge regression (scikit-learn) on price_features", f"{_TABULAR}:RIDGE"),
        Recipe(
            "lightgbm", "global", "LightGBM, a booster per horizon, on price_features", f"{_TABULAR}:LIGHTGBM"
        ),
        Recipe(
            "ridge_market",
            "global",
            "ridge on price_features and the market's returns",
            f"{_MARKET}:RIDGE_MARKET",
        ),
        Recipe(
            "lightgbm_market",
            "global",
            "LightGBM on price_features and the market's returns",
            f"{_MARKET}:LIGHTGBM_MARKET",
        ),
        Recipe(
            "global_lstm",
            "global",
            "one 2-layer LSTM over every ticker's normalised 11-feature windows",
            "ldtm_core.learning.recipes.global_lstm:GLOBAL_LSTM",
        ),
    )
}


def get(name: str) -> Recipe:
    """The recipe called `name`; InputError listing the known ones otherwise."""
    try:
        return RECIPES[name]
    except KeyError:
        raise InputError(f"recipe {name!r} is unknown; known: {', '.join(RECIPES)}") from None


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
