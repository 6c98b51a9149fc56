"""LDTM on Dagster: `defs` is the one code location (`dagster dev -m ldtm_dagster` or workspace.yaml)."""

from .definitions import defs

__all__ = ["defs"]
