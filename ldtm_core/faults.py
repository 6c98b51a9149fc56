"""TEST-ONLY fault points: let the reliability tests stop a real process at a named critical point.

`pause_point(name)` does nothing unless LDTM_TEST_PAUSE_AT names this point (`name`, or `name#N` for the
N-th time it is reached in this process). Then it writes `paused-<pid>` into LDTM_TEST_PAUSE_DIR and
waits until `release` appears there (or LDTM_TEST_PAUSE_S seconds pass), so a test can SIGKILL the
process inside the critical section, or release several processes at once to race them.
Never set these variables outside tests.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from ldtm_core.config import env_text, setting_float, setting_text

_HITS: dict[str, int] = {}


def pause_point(name: str) -> None:
    target = env_text("LDTM_TEST_PAUSE_AT")
    if not target:
        return
    point, _, nth = target.partition("#")
    if point != name:
        return
    _HITS[name] = _HITS.get(name, 0) + 1
    if nth and _HITS[name] != int(nth):
        return
    folder = Path(setting_text("LDTM_TEST_PAUSE_DIR"))
    (folder / f"paused-{os.getpid()}").write_text(name)
    deadline = time.monotonic() + setting_float("LDTM_TEST_PAUSE_S")
    while time.monotonic() < deadline and not (folder / "release").exists():
        time.sleep(0.02)
