"""`ldtm`: the command line. Each command group lives in its own module and registers on `app`."""

from __future__ import annotations

# Importing the command modules registers their commands on `app`.
from ldtm_core.cli import (  # noqa: E402,F401
    accountability,
    backtest,
    dashboard,
    data,
    decay,
    external,
    features,
    hardware,
    models,
    promotion,
    recipes,
    record,
    shadow,
    signals,
    tuning,
    universe,
)
from ldtm_core.cli.common import app  # noqa: F401  (the `ldtm` entry point: ldtm_core.cli:app)
