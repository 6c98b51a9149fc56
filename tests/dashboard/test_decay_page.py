"""The Decay page (issue 21): the alarm named with ldtm_core's figures, PSI beside it; an empty database
says there is nothing in production to watch."""

from __future__ import annotations

import pytest
from accountability_helpers import ingest, make_settings
from decay_helpers import planted_model, planted_record
from streamlit.testing.v1 import AppTest

from ldtm_core.accountability.decay.decay import DecaySettings, check
from ldtm_core.db import get_engine
from ldtm_dashboard import APP

PAGE = str(APP.parent / "views" / "decay.py")


@pytest.fixture
def env(monkeypatch, tmp_path, db_url):
    monkeypatch.setenv("LDTM_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("LDTM_DATABASE_URL", db_url)
    return db_url


def _run() -> AppTest:
    at = AppTest.from_file(PAGE, default_timeout=120)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_decay_page_lists_the_alarm_and_the_psi(env, tmp_path):
    engine = get_engine(env)
    settings = make_settings(tmp_path, env)
    ingest(engine, ["AAPL", "NVDA"], start="2022-01-03", end="2024-09-30")
    planted_record(engine, "AAPL", planted_model(engine, settings, "AAPL", seed=0), decay_at=200, seed=1)
    planted_record(engine, "NVDA", planted_model(engine, settings, "NVDA", seed=1), seed=2)
    expected = {t.ticker: t for t in check(engine, settings=DecaySettings()).tickers}

    at = _run()
    assert any("Decay in 1 of 2" in w.value and "AAPL" in w.value for w in at.warning)
    assert {m.label: m.value for m in at.metric}["decaying"] == "1"
    alarms = at.dataframe[0].value
    assert alarms["ticker"].tolist() == ["AAPL"]
    assert alarms["live_n"].iloc[0] == expected["AAPL"].n > 200
    assert alarms["cusum"].iloc[0] == pytest.approx(expected["AAPL"].chart("accuracy").statistic)
    psi = at.dataframe[2].value
    assert sorted(psi.index) == ["AAPL", "NVDA"] and psi.shape[1] == 11


def test_decay_page_on_an_empty_database(env):
    at = _run()
    assert any("No active model yet" in i.value for i in at.info)
