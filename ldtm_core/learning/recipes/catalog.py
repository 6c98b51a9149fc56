"""The recipes LDTM knows: the built-in ones (`BUILTIN`, one line each) and the plugins
`recipes.plugins` accepted (packages registering a recipe under the `ldtm.recipes` entry point group).

`RECIPES` is the one registry every part reads (the CLI's `--recipe`, Dagster's recipe partitions, the
artifacts' known kinds, `family.family`). The plugins join it at its first read in a process, not at an
import: a plugin's own module imports LDTM's (its `Family`), so one imported first (a spawned fit's child
unpickling its config, a script) is complete by the time the plugins are looked for. It lives here, apart
from `recipes/__init__.py` (which names the discovery, `plugins.install`), so that `family` (which looks
recipes up) and `plugins` (which checks a plugin's `family.Family`) import it without importing each
other.

Import-light (no torch, scikit-learn or LightGBM): the model registry reads it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, MutableMapping
from dataclasses import dataclass

from ldtm_core.errors import InputError

LSTM = "lstm"
BUILTIN_SOURCE = "ldtm"  # the source of a recipe that ships with LDTM
_TABULAR = "ldtm_core.learning.recipes.tabular"
_MARKET = "ldtm_core.learning.recipes.market"


@dataclass(frozen=True)
class Recipe:
    name: str
    scope: str  # "per ticker": one fit per ticker; "global": one fit for the whole universe
    doc: str
    family: str | None = None  # a global recipe's `recipes.family.Family`, as "module:attribute"
    # Where it comes from: "ldtm" (built in), or a plugin's distribution and version ("ldtm-recipe-knn 0.1.0").
    source: str = BUILTIN_SOURCE


BUILTIN: tuple[Recipe, ...] = (
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


class Catalog(MutableMapping[str, Recipe]):
    """The recipes by name, in order: the built-in ones, then the plugins, found at the first read (the
    discovery named by `discover_with`, run once) and replaced only by `set_plugins`."""

    def __init__(self, recipes: tuple[Recipe, ...]):
        self._recipes = {r.name: r for r in recipes}
        self._discover: Callable[[], None] | None = None
        self._lock = threading.RLock()  # another thread waits for the discovery; this one may read in it

    def discover_with(self, discover: Callable[[], None]) -> None:
        """Run `discover` at the first read (it calls `set_plugins`)."""
        self._discover = discover

    def discovered(self) -> None:
        """The plugins found, if they were not yet (a read during the discovery sees the others)."""
        if self._discover is None:
            return
        with self._lock:
            discover, self._discover = self._discover, None
            if discover is not None:
                discover()

    def set_plugins(self, previous: set[str], plugins: dict[str, Recipe]) -> None:
        """The plugins `previous` out, `plugins` in (after every other recipe)."""
        self._discover = None  # found: no discovery pending
        for name in previous:
            self._recipes.pop(name, None)
        self._recipes.update(plugins)

    def __getitem__(self, name: str) -> Recipe:
        self.discovered()
        return self._recipes[name]

    def __setitem__(self, name: str, recipe: Recipe) -> None:
        self.discovered()
        self._recipes[name] = recipe

    def __delitem__(self, name: str) -> None:
        self.discovered()
        del self._recipes[name]

    def __iter__(self) -> Iterator[str]:
        self.discovered()
        return iter(list(self._recipes))

    def __len__(self) -> int:
        self.discovered()
        return len(self._recipes)

    def __repr__(self) -> str:
        return f"Catalog({list(self._recipes)}{', plugins not yet found' if self._discover else ''})"


# Every recipe: the built-in ones, then the accepted plugins (`plugins.install`).
RECIPES = Catalog(BUILTIN)
# The plugins refused, by name: why (their distribution and version first), from `plugins.install`.
REFUSED: dict[str, str] = {}


def get(name: str) -> Recipe:
    """The recipe called `name`; InputError listing the known ones otherwise (and why, for a plugin that
    was refused)."""
    try:
        return RECIPES[name]
    except KeyError:
        why = f"; its plugin was refused: {REFUSED[name]}" if name in REFUSED else ""
        raise InputError(f"recipe {name!r} is unknown{why}; known: {', '.join(RECIPES)}") from None
