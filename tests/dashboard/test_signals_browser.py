"""The Signals page in a real browser (issue 30): headless Chromium loads it from a running `ldtm
dashboard` on a seeded SQLite market, waits for its four Altair charts to draw, saves a screenshot and fails
on a Streamlit exception box. Same fixtures and rules as test_browser.py (skips without chromium unless
LDTM_REQUIRE_BROWSER=1)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from signals_helpers import seed_market
from test_browser import browser, serve_dashboard  # noqa: F401 (browser: the fixture)

from ldtm_core.db import get_engine


@pytest.fixture
def served_signals(tmp_path, browser):  # noqa: F811
    url = f"sqlite:///{tmp_path / 'ldtm.db'}"
    from ldtm_core.migrate import upgrade

    upgrade(url)
    seed_market(
        get_engine(url), ["AAPL", "MSFT", "NVDA", "AMZN", "JPM"], "2023-01-03", "2023-06-30", skill=0.2
    )
    with serve_dashboard(url, tmp_path) as base:
        yield base


def test_signals_page_renders_in_a_real_browser(served_signals, browser, tmp_path):  # noqa: F811
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    shots = Path(os.environ.get("LDTM_SCREENSHOT_DIR") or tmp_path / "screenshots")
    shots.mkdir(parents=True, exist_ok=True)
    browser.get(f"{served_signals}/signals")
    wait = WebDriverWait(browser, 120, poll_frequency=0.5)
    wait.until(lambda d: any(h.text == "Signals" for h in d.find_elements(By.CSS_SELECTOR, "h1")))
    drawn = '[data-testid="stVegaLiteChart"] canvas, [data-testid="stVegaLiteChart"] svg'
    wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, '[data-testid="stVegaLiteChart"]')) >= 4)
    wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, drawn)) >= 4)
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, '[data-testid="stMetric"]'))
    wait.until(lambda d: d.execute_script("return document.readyState") == "complete")
    time.sleep(1.0)
    browser.save_screenshot(str(shots / "signals.png"))
    errors = browser.find_elements(By.CSS_SELECTOR, '[data-testid="stException"]')
    assert not errors, f"signals: Streamlit exception box: {errors[0].text[:500]}"
    assert "Page not found" not in browser.page_source
    assert "long bullish / short bearish" in browser.page_source
    assert (shots / "signals.png").stat().st_size > 10_000
