"""The Signals page (issue 30): ldtm_core's report (headline, metrics, charts, tables, one evening), and an
empty database that says there is nothing to trade yet."""

from __future__ import annotations

import pytest
from signals_helpers import seed_market
from streamlit.testing.v1 import AppTest

from ldtm_core.accountability.signals.signals import signal_report
from ldtm_core.db import get_engine
from ldtm_dashboard import APP

PAGE = str(APP.parent / "views" / "signals.py")


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


def test_signals_page_shows_the_report(env):
    engine = get_engine(env)
    seed_market(engine, ["AAPL", "MSFT", "NVDA", "AMZN", "JPM"], "2023-01-03", "2023-04-28", skill=0.2)
    want = signal_report(engine)
    at = _run()
    assert at.info[0].value == want.headline()
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["evenings"] == str(len(want.evenings))
    summary = at.dataframe[0].value
    assert list(summary["portfolio"]) == list(want.summary()["portfolio"])
    assert len(at.get("vega_lite_chart")) == 4
    evening = at.dataframe[-1].value
    assert sorted(evening["ticker"]) == ["AAPL", "AMZN", "JPM", "MSFT", "NVDA"]
    at.sidebar.number_input[0].set_value(50.0).run()
    assert not at.exception and "50 bp" in at.info[0].value
    # Issue 40: the page states the execution rule; same_close is the labelled upper bound.
    assert "books executed next_close" in at.info[0].value
    assert any(c.value.startswith("Execution next_close:") for c in at.caption)
    at.sidebar.selectbox[1].set_value("same_close").run()
    assert not at.exception and "not tradable: upper bound" in at.info[0].value


def test_signals_page_on_an_empty_database(env):
    at = _run()
    assert any("No filled published rows yet" in i.value for i in at.info)
