"""`ldtm dashboard` runs `streamlit run ldtm_dashboard/app.py` and passes Streamlit's flags through."""

from __future__ import annotations

import subprocess
import sys

from typer.testing import CliRunner

from ldtm_core.cli import app
from ldtm_core.cli.dashboard import dashboard_command
from ldtm_dashboard import APP


def test_flags_pass_through_and_usage_stats_stay_off_unless_asked(monkeypatch):
    calls = []
    monkeypatch.setattr(subprocess, "call", lambda cmd: calls.append(cmd) or 0)
    out = CliRunner().invoke(app, ["dashboard", "--server.port", "8600", "--server.headless", "true"])
    assert out.exit_code == 0, out.output
    assert calls == [
        [
            sys.executable,
            "-m",
            "streamlit",
            "run",
            str(APP),
            "--browser.gatherUsageStats",
            "false",
            "--server.port",
            "8600",
            "--server.headless",
            "true",
        ]
    ]
    own = dashboard_command(["--browser.gatherUsageStats=true"])
    assert own[-1] == "--browser.gatherUsageStats=true" and own.count("false") == 0


def test_streamlit_exit_code_is_the_commands(monkeypatch):
    monkeypatch.setattr(subprocess, "call", lambda cmd: 3)
    assert CliRunner().invoke(app, ["dashboard"]).exit_code == 3
