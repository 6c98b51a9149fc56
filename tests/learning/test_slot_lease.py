"""`slot_lease`: processes that want one of a pool's N slots at once never hold more than N, on SQLite
and on PostgreSQL, and a holder that is killed frees its slot."""

import json
import signal
import subprocess
import sys
import time

HOLDER = """
import json, os, sys, time
from ldtm_core.learning.slot_lease import slot_lease
url, pool, slots, hold_s, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), sys.argv[5]
print("ready", flush=True)
while not os.path.exists(out + ".go"):  # every holder starts asking at once
    time.sleep(0.01)
with slot_lease(url, pool, slots, poll_s=0.05) as slot:
    start = time.time()
    print("holding", slot, flush=True)
    time.sleep(hold_s)
    end = time.time()
with open(out, "a") as f:
    f.write(json.dumps([slot, start, end]) + "\\n")
"""


def _holder(url, pool, slots, hold_s, out):
    return subprocess.Popen(
        [sys.executable, "-c", HOLDER, url, pool, str(slots), str(hold_s), str(out)],
        stdout=subprocess.PIPE,
        text=True,
    )


def _max_overlap(spans) -> int:
    events = sorted([(s, 1) for _, s, _ in spans] + [(e, -1) for _, _, e in spans])
    live = peak = 0
    for _, d in events:
        live += d
        peak = max(peak, live)
    return peak


def test_four_processes_share_two_slots_and_never_hold_three(db_url, tmp_path):
    out = tmp_path / "spans.jsonl"
    procs = [_holder(db_url, "gpu@test", 2, 1.0, out) for _ in range(4)]
    assert [p.stdout.readline().strip() for p in procs] == ["ready"] * 4
    (tmp_path / "spans.jsonl.go").write_text("")
    assert [p.wait(timeout=120) for p in procs] == [0] * 4
    spans = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(spans) == 4 and {slot for slot, _, _ in spans} == {0, 1}
    assert _max_overlap(spans) == 2, spans


def test_a_killed_holder_frees_its_slot_and_another_pool_is_not_held_up(db_url, tmp_path):
    out = tmp_path / "spans.jsonl"
    (tmp_path / "spans.jsonl.go").write_text("")
    holder = _holder(db_url, "gpu@test", 1, 60, out)
    assert [holder.stdout.readline().split() for _ in "ab"] == [["ready"], ["holding", "0"]]
    other_pool = _holder(db_url, "gpu@elsewhere", 1, 0, out)  # its own slots: not kept waiting
    assert other_pool.wait(timeout=60) == 0
    waiter = _holder(db_url, "gpu@test", 1, 0, out)
    time.sleep(1.0)
    assert waiter.poll() is None, "took the slot another process holds"
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    assert waiter.wait(timeout=60) == 0  # the kernel (flock) or the server (a closed session) freed it
    assert len(out.read_text().splitlines()) == 2
