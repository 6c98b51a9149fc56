"""`ldtm dashboard` runs `streamlit run ldtm_dashboard/app.py` and passes Streamlit's flags through."""

from __future__ import annotations

import os
import sys

import pytest
from typer.testing import CliRunner

from ldtm_core.cli import app
from ldtm_core.cli.dashboard import dashboard_command
from ldtm_dashboard import APP


class Exec(Exception):
    pass


def _fake_exec(calls):
    def execv(path, argv):
        calls.append((path, argv))
        raise Exec  # the real one never returns

    return execv


def test_flags_pass_through_and_usage_stats_stay_off_unless_asked(monkeypatch):
    calls = []
    monkeypatch.setattr(os, "execv", _fake_exec(calls))
    out = CliRunner().invoke(app, ["dashboard", "--server.port", "8600", "--server.headless", "true"])
    assert isinstance(out.exception, Exec), out.output
    assert [argv for _, argv in calls] == [
        [
            sys.executable,
            "-m",
            "streamlit",
            "run",
            str(APP),
            "--browser.gatherUsageStats",
            "false",
            # A reader's dashboard: no Deploy button, rerun or clear-cache in the toolbar.
            "--client.toolbarMode",
            "viewer",
            "--server.port",
            "8600",
            "--server.headless",
            "true",
        ]
    ]
    own = dashboard_command(["--browser.gatherUsageStats=true", "--client.toolbarMode", "developer"])
    assert own[-3:] == ["--browser.gatherUsageStats=true", "--client.toolbarMode", "developer"]
    assert own.count("false") == 0 and "viewer" not in own

    assert calls[0][0] == sys.executable  # the process becomes Streamlit: signals reach the server


def test_missing_streamlit_is_one_clear_line(monkeypatch):
    import importlib.util

    import ldtm_core.cli.dashboard as dash
    from ldtm_core.errors import InputError

    real = importlib.util.find_spec
    monkeypatch.setattr(dash, "find_spec", lambda name: None if name == "streamlit" else real(name))
    with pytest.raises(InputError, match="streamlit is not installed"):
        dash.dashboard_command([])


@pytest.mark.parametrize("name, value", [("LDTM_SIGNAL_COST_BP", "abc"), ("LDTM_NEUTRAL_BAND_PCT", "-1")])
def test_a_bad_setting_stops_the_dashboard_before_it_serves(monkeypatch, name, value):
    # Issue 38 D6: `ldtm dashboard` started with LDTM_SIGNAL_COST_BP=abc; the Leaderboard and Signals pages
    # then showed exception boxes. The settings are checked before Streamlit starts.
    calls = []
    monkeypatch.setattr(os, "execv", _fake_exec(calls))
    monkeypatch.setenv(name, value)
    out = CliRunner().invoke(app, ["dashboard"])
    assert out.exit_code == 2 and calls == [] and name in out.output and "Traceback" not in out.output
