"""`ldtm dashboard`: serve the Streamlit forecast dashboard (ldtm_dashboard), passing Streamlit's flags on."""

from __future__ import annotations

import os
import sys
from importlib.util import find_spec
from pathlib import Path

import typer

from ldtm_core.cli.common import app, handle_errors

# Offline by default: no usage statistics sent anywhere; and a reader's dashboard: the toolbar shows the
# viewer's options only (no Deploy button, rerun or clear cache). A flag the user passes wins.
DEFAULT_FLAGS = {"--browser.gatherUsageStats": "false", "--client.toolbarMode": "viewer"}


def dashboard_command(streamlit_args: list[str]) -> list[str]:
    """The `streamlit run` command line for the dashboard with the user's Streamlit flags."""
    from ldtm_core.errors import InputError

    spec = find_spec("ldtm_dashboard")
    if spec is None or spec.origin is None:
        raise InputError("the ldtm_dashboard package is not installed (pip install -e .)")
    if find_spec("streamlit") is None:
        raise InputError("streamlit is not installed: pip install streamlit (it is a dependency of ldtm)")
    script = Path(spec.origin).resolve().parent / "app.py"
    given = {a.split("=", 1)[0] for a in streamlit_args if a.startswith("--")}
    defaults = [part for flag, value in DEFAULT_FLAGS.items() if flag not in given for part in (flag, value)]
    return [sys.executable, "-m", "streamlit", "run", str(script), *defaults, *streamlit_args]


@app.command(
    "dashboard",
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
)
@handle_errors
def dashboard_cmd(ctx: typer.Context) -> None:
    """Serve the forecast dashboard (Leaderboard, Ticker, Runs, Decay, Signals) on the configured database.

    Every argument goes to Streamlit, e.g. `ldtm dashboard --server.port 8600 --server.headless true`.
    """
    from ldtm_core.config import Settings

    Settings.from_env()  # every setting checked before the server starts: a bad one is one error here,
    # not an exception box on a page later
    command = dashboard_command(list(ctx.args))
    sys.stdout.flush()
    # Become Streamlit (no child process): a signal to `ldtm dashboard` (Ctrl-C, `docker stop`, a
    # test's terminate) reaches the server itself instead of orphaning it.
    os.execv(command[0], command)
