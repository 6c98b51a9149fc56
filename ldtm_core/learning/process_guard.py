"""Training processes never outlive the run that started them.

Two guards, both needed: a worker asks the kernel to kill it when its parent dies
(`PR_SET_PDEATHSIG`, Linux), which covers a SIGKILLed parent that can run no cleanup; and a
watchdog thread polls whether the work it serves is over (a Dagster run marked failed or
canceled while this process still lives) and then stops this process, so no orphan goes on
registering candidates after its run ended.

A process a forkserver started has the forkserver as its parent, not the process that asked for it
(a Dagster run worker): `die_with_starter` watches the asker's end of the pipe multiprocessing keeps
between them, which the kernel closes when the asker dies, however it dies.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import multiprocessing
import multiprocessing.connection
import os
import signal
import sys
import threading
from collections.abc import Callable

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def die_with_parent(sig: int = signal.SIGKILL) -> bool:
    """Have the kernel send `sig` to this process when its parent exits. False where unsupported."""
    if not sys.platform.startswith("linux"):
        return False
    parent = os.getppid()
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) != 0:
        return False
    if os.getppid() != parent:  # the parent died before prctl took effect: nobody will signal us
        os.kill(os.getpid(), sig)
    return True


def die_with_starter(sig: int = signal.SIGKILL) -> bool:
    """Send `sig` to this process when the process that started it through multiprocessing dies (under a
    forkserver that is not the parent `die_with_parent` follows). False where no process started it."""
    starter = multiprocessing.parent_process()
    if starter is None or starter.sentinel is None:
        return False

    def watch() -> None:
        multiprocessing.connection.wait([starter.sentinel])  # readable once the starter's end closes
        os.kill(os.getpid(), sig)

    threading.Thread(target=watch, name="ldtm-starter-watch", daemon=True).start()
    return True


def kill_self() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


class Watchdog:
    """Calls `is_over()` every `interval_s` in a daemon thread; the first True runs `on_over` (default:
    SIGKILL this process, which with `die_with_parent` in its children stops them too)."""

    def __init__(
        self,
        is_over: Callable[[], bool],
        interval_s: float = 2.0,
        on_over: Callable[[], None] = kill_self,
    ):
        self.is_over, self.interval_s, self.on_over = is_over, interval_s, on_over
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="ldtm-watchdog", daemon=True)

    def _watch(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                over = self.is_over()
            except Exception:  # noqa: BLE001 - a failed poll (DB blip) is not a reason to kill
                continue
            if over and not self._stop.is_set():
                self.on_over()
                return

    def __enter__(self) -> Watchdog:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=self.interval_s + 1)
