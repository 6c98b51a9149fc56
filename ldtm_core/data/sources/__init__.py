"""Price sources, chosen by configuration: `LDTM_PRICE_SOURCE` = synthetic | files:<dir> | yfinance | ib.

The network adapters import their libraries only when used (optional extras `ldtm[yfinance]`,
`ldtm[ib]`), so the platform, its demo and its tests never need them.
"""

from __future__ import annotations

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
SPEC_HELP = "synthetic | files:<dir> | yfinance | ib"

__all__ = [
    "DEFAULT_SOURCE",
    "ENV_SOURCE",
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
    kind, _, arg = spec.partition(":")
    kind = kind.strip().lower()
    if kind == "synthetic" and not arg:
        from ldtm_core.data.sources.synthetic import SyntheticSource

        return SyntheticSource(seed=seed)
    if kind == "files":
        if not arg.strip():
            raise InputError(f"price source {spec!r}: give the folder, e.g. files:/data/drop")
        from ldtm_core.data.sources.files import FilesSource

        return FilesSource(arg.strip())
    if kind == "yfinance" and not arg:
        from ldtm_core.data.sources.yfinance import YFinanceSource

        return YFinanceSource.from_env()
    if kind == "ib" and not arg:
        from ldtm_core.data.sources.ib import IBSource

        return IBSource.from_env()
    raise InputError(f"unknown price source {spec!r} (expected {SPEC_HELP})")
