"""Training processes never outlive their parent or their run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from ldtm_core.learning.process_guard import Watchdog

CHILD = "from ldtm_core.learning.process_guard import die_with_parent; import time; die_with_parent(); print('ready', flush=True); time.sleep(60)"
PARENT = f"""
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", {CHILD!r}], stdout=subprocess.PIPE, text=True)
child.stdout.readline()
print(child.pid, flush=True)
time.sleep(60)
"""


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux-only")
def test_a_worker_dies_with_its_sigkilled_parent():
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True, cwd=os.getcwd()
    )
    child = int(parent.stdout.readline())
    assert _alive(child)
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    deadline = time.monotonic() + 5
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(child)


def test_watchdog_acts_once_when_the_work_is_over_and_never_after_exit():
    over, fired = threading.Event(), []
    with Watchdog(over.is_set, interval_s=0.05, on_over=lambda: fired.append(time.monotonic())):
        time.sleep(0.2)
        assert fired == []
        over.set()
        time.sleep(0.3)
    assert len(fired) == 1
    # Polls that fail (a database blip) are not a reason to act; leaving the block stops the thread.
    calls = []

    def flaky():
        calls.append(1)
        raise RuntimeError("db down")

    with Watchdog(flaky, interval_s=0.02, on_over=lambda: fired.append(0)):
        time.sleep(0.15)
    n = len(calls)
    time.sleep(0.1)
    assert len(calls) == n and len(fired) == 1


STARTER = """
import multiprocessing, sys, time
from ldtm_core.learning.process_guard import die_with_parent, die_with_starter

def step(guard, ready):
    die_with_parent()
    if guard:
        die_with_starter()
    ready.put(multiprocessing.current_process().pid)
    time.sleep(60)

if __name__ == "__main__":
    ctx = multiprocessing.get_context("forkserver")
    ready = ctx.Queue()
    ctx.Process(target=step, args=(sys.argv[1] == "guarded", ready)).start()
    print(ready.get(timeout=60), flush=True)
    time.sleep(60)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux-only")
@pytest.mark.parametrize("guard", ["guarded", "parent only"])
def test_a_forkserver_child_dies_with_its_sigkilled_starter(guard, tmp_path):
    """A Dagster step forked from the run worker's forkserver has the forkserver as its parent, which
    outlives the run worker while any child it forked lives: `die_with_parent` alone leaves the step
    running after its run worker was killed; `die_with_starter` ends it."""
    script = tmp_path / "starter.py"
    script.write_text(STARTER)
    starter = subprocess.Popen(
        [sys.executable, str(script), guard], stdout=subprocess.PIPE, text=True, cwd=os.getcwd()
    )
    child = int(starter.stdout.readline())
    assert _alive(child)
    starter.send_signal(signal.SIGKILL)
    starter.wait()
    deadline = time.monotonic() + (5 if guard == "guarded" else 2)  # the guarded one goes in ~0.1 s
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        assert _alive(child) == (guard == "parent only")
    finally:
        if _alive(child):
            os.kill(child, signal.SIGKILL)
