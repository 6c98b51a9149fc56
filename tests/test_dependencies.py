"""The installed product needs only its declared runtime dependencies (the images install exactly those:
a module the dev extra happened to provide crashed the compose stack's code server on import)."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PRODUCT = ("ldtm_core", "ldtm_dagster", "ldtm_dashboard")
# Imported lazily, only when selected, and declared as optional extras (yfinance, ib).
OPTIONAL = {"yfinance", "ib_async"}


def _top_level_imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def _distribution(requirement: str) -> str:
    return re.split(r"[<>=!~\[; ]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def test_every_third_party_import_of_the_product_is_a_runtime_dependency():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = {_distribution(r) for r in project["dependencies"]}
    dists = packages_distributions()
    missing = {}
    for package in PRODUCT:
        for path in (ROOT / package).rglob("*.py"):
            for module in _top_level_imports(path) - set(sys.stdlib_module_names) - set(PRODUCT) - OPTIONAL:
                owners = {d.lower().replace("_", "-") for d in dists.get(module, [])}
                if owners and not owners & declared:
                    missing.setdefault(module, []).append(str(path.relative_to(ROOT)))
    assert not missing, f"imported but not in [project] dependencies: {missing}"
