"""LDTM_SNAPSHOT_DEADLINE: a New York time of day, nothing else (issue 38 D9: `21:00+05:00` was accepted,
then the freshness check failed with a TypeError comparing an aware time with a naive one)."""

from __future__ import annotations

import datetime as dt

import pytest

from ldtm_core.accountability.alerts.operator_alerts import deadline_from_env
from ldtm_core.errors import ConfigError


@pytest.mark.parametrize("raw", ["21:00+05:00", "21:00Z", "9pm", "25:00"])
def test_a_deadline_with_an_offset_or_no_time_is_refused_by_name(monkeypatch, raw):
    monkeypatch.setenv("LDTM_SNAPSHOT_DEADLINE", raw)
    with pytest.raises(ConfigError, match="LDTM_SNAPSHOT_DEADLINE"):
        deadline_from_env()


def test_a_new_york_time_of_day_is_read(monkeypatch):
    monkeypatch.setenv("LDTM_SNAPSHOT_DEADLINE", "20:30")
    assert deadline_from_env() == dt.time(20, 30)


def test_the_default_deadline_is_the_settings_row(monkeypatch):
    """One home (issue 39): unset, the deadline is LDTM_SNAPSHOT_DEADLINE's row default in config.SETTINGS,
    and changing that row changes it."""
    import dataclasses

    from ldtm_core import config

    monkeypatch.delenv("LDTM_SNAPSHOT_DEADLINE", raising=False)
    row = config.SETTINGS["LDTM_SNAPSHOT_DEADLINE"]
    assert deadline_from_env() == dt.time.fromisoformat(row.default)
    monkeypatch.setitem(config.SETTINGS, row.name, dataclasses.replace(row, default="19:45"))
    assert deadline_from_env() == dt.time(19, 45)
