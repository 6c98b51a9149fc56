"""LDTM on Dagster: `defs` is the one code location (`dagster dev -m ldtm_dagster` or workspace.yaml)."""

import sys
import warnings

from dagster import BetaWarning

from ldtm_core.errors import LDTMError

# BackfillPolicy is beta in Dagster 1.13; its warning would repeat in every spawned training worker.
warnings.filterwarnings("ignore", category=BetaWarning)


def _code_server() -> bool:
    """Loaded by a gRPC code server (`dagster dev`, the daemon's workspace): there Dagster catches the
    error and shows it in the UI, which a process exit would replace with "server unreachable"."""
    return "api" in sys.argv[1:3] and "grpc" in sys.argv[1:4]


try:
    from .definitions import defs  # noqa: E402
except LDTMError as exc:  # a setting read at load (LDTM_UNIVERSE, LDTM_DEPLOYMENT...): one line, no trace
    if _code_server():
        raise
    sys.stderr.write(f"error: ldtm_dagster cannot load: {exc}\n")
    raise SystemExit(2) from None

__all__ = ["defs"]
