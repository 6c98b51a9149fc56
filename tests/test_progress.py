"""Progress of long commands: counts and ETA; a bar on a terminal, periodic plain lines otherwise."""

from __future__ import annotations

import io

from ldtm_core.progress import ProgressLog, format_duration, progress


def test_eta_from_the_mean_time_per_item():
    now = [0.0]
    log = ProgressLog("train", 4, clock=lambda: now[0])
    assert log.eta_s() is None
    now[0] = 30.0
    line = log.advance("AAPL trained")
    assert log.eta_s() == 90.0
    assert line == "train 1/4: AAPL trained (elapsed 30s, ETA 1m30s)"
    now[0] = 120.0
    log.advance(n=3)
    assert log.line() == "train 4/4 (elapsed 2m00s)"
    assert format_duration(3 * 3600 + 65) == "3h01m"


def test_plain_output_prints_periodic_lines_and_the_last():
    out = io.StringIO()
    with progress("ingest", 50, stream=out, every_s=3600, tty=False) as advance:
        for i in range(50):
            advance(f"f{i}.csv ok")
    lines = out.getvalue().splitlines()
    # Not one line per item: within the period only the final count is printed.
    assert len(lines) == 1 and lines[0].startswith("ingest 50/50: f49.csv ok")
    out = io.StringIO()
    with progress("ingest", 3, stream=out, every_s=0, tty=False) as advance:
        for i in range(3):
            advance(f"f{i}")
    assert [ln.split(":")[0] for ln in out.getvalue().splitlines()] == [
        "ingest 1/3",
        "ingest 2/3",
        "ingest 3/3",
    ]


def test_terminal_output_is_a_bar_with_counts():
    out = io.StringIO()
    with progress("train", 2, stream=out, tty=True) as advance:
        advance("AAPL trained")
        advance("NVDA trained")
    text = out.getvalue()
    assert "train" in text and "2/2" in text
