"""Recipes from packages of their own: a distribution installed beside LDTM registers a global recipe
under the `ldtm.recipes` entry point group, the entry point's name being the recipe's and its value
("module:attribute") naming a `family.Family` (docs/bring-your-own-model.md, "Recipes as plugins").

`install` runs once per process, at the first read of `catalog.RECIPES` (`recipes/__init__.py` names it
the catalog's discovery): it imports each plugin's module, checks its family against the contract
(`problem`), and adds each plugin that keeps it to `RECIPES` as a global `Recipe` whose source is its
distribution and version. A plugin that fails to import, clashes with a built-in name or breaks the
contract is refused alone, by name, with the reason: kept in `catalog.REFUSED` (`refused()`), logged once
as a warning, never raised. `install(entry_points)` runs the discovery again on others (the tests).

Import-light: only importlib.metadata until a plugin is found (the registry imports this through
`recipes/__init__.py`).
"""

from __future__ import annotations

import importlib.metadata as md
import logging
import re
import sys
from collections.abc import Iterable
from typing import Any

from ldtm_core.errors import summary
from ldtm_core.learning.recipes.catalog import BUILTIN, RECIPES, REFUSED, Recipe

GROUP = "ldtm.recipes"
# A recipe's name is a partition key, a file name and a `--recipe` value: lower-case, plain.
NAME = re.compile(r"^[a-z][a-z0-9_]{0,39}$")
VALUE = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")  # "module:attribute"
NO_DISTRIBUTION = "no distribution"

log = logging.getLogger(__name__)
_installed: set[str] = set()  # the names `install` added to RECIPES (so a rerun removes only those)
_warned: set[tuple[str, str]] = set()  # (name, reason) already logged


def source_of(entry_point: Any) -> str:
    """The distribution and version that registers `entry_point` ("ldtm-recipe-knn 0.1.0")."""
    dist = getattr(entry_point, "dist", None)
    if dist is None:
        return NO_DISTRIBUTION
    return f"{dist.name} {dist.version}"


def _importing(module: str) -> bool:
    """Whether `module` is being imported right now (it is in sys.modules, not yet complete)."""
    spec = getattr(sys.modules.get(module), "__spec__", None)
    return bool(getattr(spec, "_initializing", False))


def _module_doc(entry_point: Any) -> str:
    module = sys.modules.get(entry_point.value.partition(":")[0])
    lines = ((module.__doc__ if module is not None else None) or "").strip().splitlines()
    return lines[0].strip() if lines else ""


def problem(name: str, fam: Any) -> str | None:
    """Why `fam` cannot be recipe `name`'s family (None: it keeps the contract as far as can be checked
    before a fit): a `Family` of an API version this LDTM speaks, whose config is a frozen `RecipeConfig`
    dataclass with a default for every field, fit/predict/dump/load callable, inputs an `inputs.Inputs`,
    libraries installed distributions."""
    from dataclasses import MISSING, fields

    from ldtm_core.learning.recipes.family import SUPPORTED_API_VERSIONS, Family, RecipeConfig
    from ldtm_core.learning.recipes.inputs import Inputs

    if not isinstance(fam, Family):
        return f"it names a {type(fam).__name__}, not a ldtm_core.learning.recipes.family.Family"
    if fam.api_version not in SUPPORTED_API_VERSIONS:
        speaks = ", ".join(map(str, SUPPORTED_API_VERSIONS))
        return f"it declares recipe API version {fam.api_version!r}; this LDTM speaks version {speaks}"
    config = fam.config
    if not (isinstance(config, type) and issubclass(config, RecipeConfig)):
        return f"its config {config!r} is not a subclass of RecipeConfig"
    params = vars(config).get("__dataclass_params__")  # its own: an undecorated subclass has none
    if params is None or not params.frozen:
        return f"its config {config.__name__} is not a frozen dataclass (@dataclass(frozen=True))"
    bare = [f.name for f in fields(config) if f.default is MISSING and f.default_factory is MISSING]
    if bare:
        return f"its config {config.__name__} has no default for field(s) {', '.join(bare)}"
    for part in ("fit", "predict", "dump", "load"):
        if not callable(getattr(fam, part)):
            return f"its {part} is a {type(getattr(fam, part)).__name__}, not callable"
    if not isinstance(fam.inputs, Inputs):
        return f"its inputs are a {type(fam.inputs).__name__}, not a ldtm_core.learning.recipes.inputs.Inputs"
    if not isinstance(fam.doc, str):
        return f"its doc is a {type(fam.doc).__name__}, not a string"
    libraries = fam.libraries
    if not isinstance(libraries, tuple | list) or not all(isinstance(lib, str) for lib in libraries):
        return f"its libraries {libraries!r} are not distribution names"
    for lib in libraries:
        try:
            md.version(lib)
        except md.PackageNotFoundError:
            return f"it names library {lib!r}, which is not installed"
    try:  # what `ldtm train --recipe NAME` builds before anything else
        config.from_dict({**config().to_dict(), "kind": name})
    except Exception as exc:  # noqa: BLE001 - the plugin's own code: any failure is a refusal
        return f"its config {config.__name__} cannot be built from its defaults: {summary(exc)}"
    return None


def _accept(name: str, entry_point: Any) -> Recipe | str:
    """Recipe `name` from `entry_point`, or why it is refused."""
    if name in {r.name for r in BUILTIN}:
        return f"its name {name!r} is a built-in recipe's"
    if name == "external":  # registry.EXTERNAL: the tag of submitted models' rows (not imported: layers)
        return f"its name {name!r} is reserved for submitted models"
    if not NAME.match(name):
        return f"its name {name!r} is not a recipe name (a-z first, then a-z, 0-9 or _, at most 40)"
    if not VALUE.match(entry_point.value or ""):
        return f"its value {entry_point.value!r} is not 'module:attribute'"
    try:
        fam = entry_point.load()
    except (Exception, SystemExit) as exc:  # the plugin's import: anything it raises refuses it alone
        if _importing(entry_point.value.partition(":")[0]):
            return (
                f"cannot import {entry_point.value}: its module was still being imported when the recipes "
                "were first read (it reads LDTM's recipes while it is imported)"
            )
        return f"cannot import {entry_point.value}: {summary(exc)}"
    try:
        why = problem(name, fam)
    except Exception as exc:  # noqa: BLE001 - an object whose attributes raise
        why = f"its family cannot be checked: {summary(exc)}"
    if why is not None:
        return why
    doc = " ".join(fam.doc.split()) or _module_doc(entry_point)
    return Recipe(name, "global", doc, entry_point.value, source_of(entry_point))


def entry_points() -> list:
    """The installed distributions' entry points in the `ldtm.recipes` group."""
    return list(md.entry_points(group=GROUP))


def discover(found: Iterable[Any] | None = None) -> tuple[dict[str, Recipe], dict[str, str]]:
    """({name: Recipe} of the plugins accepted, {name: why} of those refused) among entry points `found`
    (default: the installed ones). A refusal's reason starts with the plugin's source."""
    if found is None:
        try:
            found = entry_points()
        except Exception as exc:  # noqa: BLE001 - broken installed metadata: no plugin, said once
            return {}, {f"({GROUP})": f"the installed entry points cannot be read: {summary(exc)}"}
    by_name: dict[str, dict[tuple[str, str], Any]] = {}
    for ep in found:  # the same distribution seen twice on sys.path is one plugin
        by_name.setdefault(ep.name, {}).setdefault((source_of(ep), ep.value), ep)
    accepted: dict[str, Recipe] = {}
    refused: dict[str, str] = {}
    for name, eps in by_name.items():
        if len(eps) > 1:
            sources = ", ".join(sorted(f"{s} ({v})" for s, v in eps))
            refused[name] = f"{sources}: each registers recipe {name!r}; uninstall all but one"
            continue
        ep = next(iter(eps.values()))
        outcome = _accept(name, ep)
        if isinstance(outcome, Recipe):
            accepted[name] = outcome
        else:
            refused[name] = f"{source_of(ep)}: {outcome}"
    return accepted, refused


def install(found: Iterable[Any] | None = None) -> None:
    """Discover the plugins among `found` (default: the installed entry points) and make them the
    catalog's: the accepted in `RECIPES` after the built-in recipes (those a previous run added are
    removed first), the refused in `REFUSED`, each refusal logged as a warning once."""
    RECIPES.set_plugins(set(), {})  # no discovery pending: a read while this runs sees the others
    accepted, refused = discover(found)
    RECIPES.set_plugins(_installed, accepted)
    _installed.clear()
    _installed.update(accepted)
    REFUSED.clear()
    REFUSED.update(refused)
    for name, why in refused.items():
        if (name, why) not in _warned:
            _warned.add((name, why))
            log.warning("recipe plugin %r refused: %s", name, why)


def accepted() -> dict[str, Recipe]:
    """The plugins' recipes in `RECIPES`, by name."""
    return {name: recipe for name, recipe in RECIPES.items() if name in _installed}


def refused() -> dict[str, str]:
    """The plugins refused, by name: why (their source first)."""
    RECIPES.discovered()
    return dict(REFUSED)
