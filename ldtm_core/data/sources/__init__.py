"""Price sources, chosen by configuration: `LDTM_PRICE_SOURCE` = synthetic | files:<dir> | yfinance | ib.

Each module of this package that defines a `PriceSource` subclass with a `name` is a source: `SOURCES`
finds it, so adding one is one module (and its tests). The network adapters import their libraries
only when used (optional extras `ldtm[yfinance]`, `ldtm[ib]`), so the platform, its demo and its tests
never need them.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil

from ldtm_core.config import env_text
from ldtm_core.data.sources.base import (
    FileReceipt,
    PriceSource,
    SourceAnswer,
    TransientSourceError,
    with_retries,
)
from ldtm_core.errors import InputError

ENV_SOURCE = "LDTM_PRICE_SOURCE"
DEFAULT_SOURCE = "synthetic"


def discover(path: list[str], package: str) -> dict[str, type[PriceSource]]:
    """{name: class} of every source defined in the modules of `package` (at `path`): the default first,
    then those taking an argument, then by name."""
    found: dict[str, type[PriceSource]] = {}
    for module in pkgutil.iter_modules(path):
        loaded = importlib.import_module(f"{package}.{module.name}")
        for obj in vars(loaded).values():
            defined_here = isinstance(obj, type) and obj.__module__ == loaded.__name__
            if defined_here and issubclass(obj, PriceSource) and not inspect.isabstract(obj):
                if obj.name in found:
                    raise RuntimeError(f"two price sources named {obj.name!r}")
                found[obj.name] = obj
    return dict(
        sorted(found.items(), key=lambda kv: (kv[0] != DEFAULT_SOURCE, kv[1].argument is None, kv[0]))
    )


SOURCES = discover(__path__, __name__)
SPEC_HELP = " | ".join(name + (f":{cls.argument}" if cls.argument else "") for name, cls in SOURCES.items())

__all__ = [
    "DEFAULT_SOURCE",
    "ENV_SOURCE",
    "SOURCES",
    "FileReceipt",
    "PriceSource",
    "SourceAnswer",
    "TransientSourceError",
    "configured_spec",
    "make_source",
    "with_retries",
]


def configured_spec(spec: str | None = None) -> str:
    """The spec given, else $LDTM_PRICE_SOURCE, else synthetic."""
    return (spec or env_text(ENV_SOURCE, DEFAULT_SOURCE)).strip()


def make_source(spec: str | None = None, *, seed: int = 0) -> PriceSource:
    """The source a spec names (None: the environment's, else synthetic). Raises InputError for an
    unknown spec or a network source whose optional library is not installed."""
    spec = configured_spec(spec)
    kind, colon, arg = spec.partition(":")
    source = SOURCES.get(kind.strip().lower())
    if source is None or (source.argument is None and colon):
        raise InputError(f"unknown price source {spec!r} (expected {SPEC_HELP})")
    return source.from_spec(arg, seed=seed)
