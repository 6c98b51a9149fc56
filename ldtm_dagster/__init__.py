"""LDTM on Dagster: `defs` is the one code location (`dagster dev -m ldtm_dagster` or workspace.yaml)."""

import warnings

from dagster import BetaWarning

# BackfillPolicy is beta in Dagster 1.13; its warning would repeat in every spawned training worker.
warnings.filterwarnings("ignore", category=BetaWarning)

from .definitions import defs  # noqa: E402

__all__ = ["defs"]
