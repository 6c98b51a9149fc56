"""One real browser: headless Chromium loads every page of a running `ldtm dashboard` (seeded SQLite),
waits for it to render, saves a screenshot, and fails on a Streamlit exception box.

Needs the Debian packages `chromium` and `chromium-driver` (.ci/run installs them). Locally the test
skips when they are missing, unless LDTM_REQUIRE_BROWSER=1 (set by .ci/run), which turns that into a
failure. Screenshots go to $LDTM_SCREENSHOT_DIR when set, else the test's tmp directory.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from dashboard_helpers import seed

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
LDTM = Path(sys.executable).with_name("ldtm")
PAGES = [  # (screenshot, path, title, selectors that must be rendered); the default page is at /
    ("leaderboard", "", "Leaderboard", ['[data-testid="stDataFrame"]', '[data-testid="stVegaLiteChart"]']),
    (
        "ticker",
        "ticker?ticker=AAPL",
        "Ticker",
        ['[data-testid="stVegaLiteChart"]', '[data-testid="stMetric"]'],
    ),
    ("runs", "runs", "Runs", ['[data-testid="stDataFrame"]', '[data-testid="stMetric"]']),
]

# Sentences a reader must see rendered: the board's record answer (coin included) and what its labels
# control and could show, beside the window's answer described as a description.
TEXTS = {
    "leaderboard": (
        "Shown to beat every baseline, a coin included (whole record)",
        "30-day window (a description, not the label)",
        "How these answers are reached",
    )
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def browser():
    if not (CHROMIUM and CHROMEDRIVER):
        message = "headless Chromium not installed (apt-get install chromium chromium-driver)"
        if os.environ.get("LDTM_REQUIRE_BROWSER") == "1":
            pytest.fail(message + " while LDTM_REQUIRE_BROWSER=1")
        pytest.skip(message)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1440,2200"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    yield driver
    driver.quit()


@contextlib.contextmanager
def serve_dashboard(url: str, tmp_path: Path):
    """`ldtm dashboard` on a free port over the database `url`, until its health check answers; yields
    its base URL and stops it after (its log in tmp_path/dashboard.log)."""
    port = _free_port()
    env = {**os.environ, "LDTM_DATABASE_URL": url, "LDTM_HOME": str(tmp_path / "home")}
    flags = ["--server.port", str(port), "--server.headless", "true", "--server.address", "127.0.0.1"]
    log = open(tmp_path / "dashboard.log", "w")  # noqa: SIM115 (closed below)
    proc = subprocess.Popen([str(LDTM), "dashboard", *flags], env=env, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                with urllib.request.urlopen(f"{base}/_stcore/health", timeout=2) as r:
                    if r.read() == b"ok":
                        break
            except OSError:
                pass
            assert proc.poll() is None, (tmp_path / "dashboard.log").read_text()
            assert time.monotonic() < deadline, "ldtm dashboard did not answer within 90 s"
            time.sleep(0.5)
        yield base
    finally:
        proc.terminate()
        proc.wait(timeout=20)
        log.close()


@pytest.fixture
def served(tmp_path, browser):
    url = f"sqlite:///{tmp_path / 'ldtm.db'}"
    from ldtm_core.migrate import upgrade

    upgrade(url)
    seed(tmp_path, url)
    with serve_dashboard(url, tmp_path) as base:
        yield base


def test_every_page_renders_in_a_real_browser(served, browser, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    shots = Path(os.environ.get("LDTM_SCREENSHOT_DIR") or tmp_path / "screenshots")
    shots.mkdir(parents=True, exist_ok=True)
    for name, path, title, selectors in PAGES:
        browser.get(f"{served}/{path}")
        wait = WebDriverWait(browser, 120, poll_frequency=0.5)
        wait.until(lambda d, t=title: any(h.text == t for h in d.find_elements(By.CSS_SELECTOR, "h1")))
        for selector in selectors:
            wait.until(lambda d, s=selector: d.find_elements(By.CSS_SELECTOR, s))
        # Rendered and idle: Vega charts have drawn their canvas/SVG and the script is no longer running.
        wait.until(
            lambda d: (
                d.find_elements(
                    By.CSS_SELECTOR,
                    '[data-testid="stVegaLiteChart"] canvas, [data-testid="stVegaLiteChart"] svg',
                )
                or "runs" in d.current_url
            )
        )
        wait.until(lambda d: d.execute_script("return document.readyState") == "complete")
        time.sleep(1.0)
        browser.save_screenshot(str(shots / f"{name}.png"))
        errors = browser.find_elements(By.CSS_SELECTOR, '[data-testid="stException"]')
        assert not errors, f"{path}: Streamlit exception box: {errors[0].text[:500]}"
        assert "Page not found" not in browser.page_source, path
        shown = browser.find_element(By.TAG_NAME, "body").text
        for text in TEXTS.get(name, ()):
            assert text in shown, (path, text)
        if name == "leaderboard":  # the table within the first 1,400 pixels (it was below that fold)
            table = browser.find_element(By.CSS_SELECTOR, '[data-testid="stDataFrame"]')
            top = browser.execute_script(
                "return arguments[0].getBoundingClientRect().top + window.scrollY", table
            )
            assert top < 1400, f"the leaderboard's table starts {top:.0f} px down"
        assert (shots / f"{name}.png").stat().st_size > 10_000
