"""Progress of long commands: a rich bar on a terminal, plain periodic lines otherwise.

`ProgressLog` is the plain part (counts, rate, ETA) and is what Dagster runs log per finished item;
`progress()` wraps it for the CLI.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager


def format_duration(seconds: float) -> str:
    seconds = max(0, int(round(seconds)))
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}h{m:02d}m" if h else f"{m}m{s:02d}s" if m else f"{s}s"


def eta_tail(done: int, total: int, elapsed_s: float) -> str:
    """`, ETA 12m30s` from the mean time per finished item; empty before the first and after the last."""
    if done <= 0 or done >= total:
        return ""
    return f", ETA {format_duration(elapsed_s / done * (total - done))}"


def run_line(label: str, done: int, total: int, elapsed_s: float, counted: str) -> str:
    """`AAPL trained (run: 37/103 trained, ETA 12m30s)`: one item's news and the whole run's count."""
    return f"{label} (run: {done}/{total} {counted}{eta_tail(done, total, elapsed_s)})"


class ProgressLog:
    """n/N, elapsed and ETA (from the mean time per finished item) of `total` items."""

    def __init__(self, what: str, total: int, clock: Callable[[], float] = time.monotonic):
        self.what, self.total, self.done, self.clock = what, total, 0, clock
        self.start = clock()

    def advance(self, label: str = "", n: int = 1) -> str:
        self.done += n
        return self.line(label)

    def line(self, label: str = "") -> str:
        elapsed = self.clock() - self.start
        head = f"{self.what} {self.done}/{self.total}"
        tail = eta_tail(self.done, self.total, elapsed)
        return f"{head}{': ' + label if label else ''} (elapsed {format_duration(elapsed)}{tail})"


@contextmanager
def progress(
    what: str, total: int, stream=None, every_s: float = 10.0, tty: bool | None = None
) -> Iterator[Callable[[str], None]]:
    """Yields `advance(label)`. On a TTY: a rich bar with counts and ETA. Else: a line at most every
    `every_s` seconds (and the last one), so a log file shows progress without one line per item."""
    stream = stream or sys.stderr
    tty = stream.isatty() if tty is None else tty
    log = ProgressLog(what, total)
    if tty:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        with Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeRemainingColumn(),
            TextColumn("{task.fields[label]}"),
            console=Console(file=stream),
            transient=False,
        ) as bar:
            task = bar.add_task(what, total=total, label="")

            def advance(label: str = "") -> None:
                log.advance(label)
                bar.update(task, advance=1, label=label)

            yield advance
        return
    last = [log.clock()]

    def advance_plain(label: str = "") -> None:
        line = log.advance(label)
        now = log.clock()
        if now - last[0] >= every_s or log.done == total:
            last[0] = now
            print(line, file=stream, flush=True)

    yield advance_plain
