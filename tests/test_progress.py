"""Progress of long commands: counts and ETA; a bar on a terminal, periodic plain lines otherwise."""

from __future__ import annotations

import io

from ldtm_core.progress import ProgressLog, format_duration, progress, run_line


def test_eta_from_the_mean_time_per_item():
    now = [0.0]
    log = ProgressLog("train", 4, clock=lambda: now[0])
    assert log.line() == "train 0/4 (elapsed 0s)"  # no ETA before the first item
    now[0] = 30.0
    line = log.advance("AAPL trained")
    assert line == "train 1/4: AAPL trained (elapsed 30s, ETA 1m30s)"
    now[0] = 120.0
    log.advance(n=3)
    assert log.line() == "train 4/4 (elapsed 2m00s)"
    assert format_duration(3 * 3600 + 65) == "3h01m"


def test_run_line_counts_the_whole_run():
    """What a Dagster chunk step logs per ticker: its news, then the run's count over every chunk."""
    assert (
        run_line("AAPL trained", 37, 103, 370.0, "trained")
        == "AAPL trained (run: 37/103 trained, ETA 11m00s)"
    )
    assert run_line("ZS ok", 103, 103, 900.0, "backtested") == "ZS ok (run: 103/103 backtested)"
    assert run_line("A failed", 0, 3, 5.0, "trained") == "A failed (run: 0/3 trained)"


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
