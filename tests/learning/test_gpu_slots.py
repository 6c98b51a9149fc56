"""Slots from free VRAM (SPEC §6), with a fake NVML module standing in for the driver."""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from ldtm_core.errors import InputError
from ldtm_core.learning import gpu_slots
from ldtm_core.learning.gpu_slots import GpuMemory, current_plan, plan_slots, probe

MIB = 1024 * 1024
POOL_ID = "LDTM_GPU_POOL_ID"  # the marker every process of the pool carries in its environment


class NVMLError(Exception):
    pass


class NVMLError_LibraryNotFound(NVMLError):  # noqa: N801 - the real pynvml name
    pass


class FakeNVML:
    """The subset of pynvml that probe() uses; memory in bytes like the real thing."""

    def __init__(self, gpus, fail_on=None, exc=NVMLError, processes=None):
        self.gpus = gpus  # [(name, total_mib, free_mib)]
        self.processes = processes or {}  # {gpu index: [(pid, used_mib)]}
        self.fail_on, self.exc = fail_on, exc
        self.shutdowns = 0

    def _maybe_fail(self, what):
        if self.fail_on == what:
            raise self.exc(what)

    def nvmlInit(self):
        self._maybe_fail("init")

    def nvmlShutdown(self):
        self.shutdowns += 1

    def nvmlDeviceGetCount(self):
        self._maybe_fail("count")
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, i):
        self._maybe_fail("handle")
        return i

    def nvmlDeviceGetMemoryInfo(self, h):
        self._maybe_fail("memory")
        _, total, free = self.gpus[h]
        return SimpleNamespace(total=total * MIB, free=free * MIB, used=(total - free) * MIB)

    def nvmlDeviceGetName(self, h):
        return self.gpus[h][0].encode() if h % 2 else self.gpus[h][0]  # bytes from old bindings too

    def nvmlDeviceGetComputeRunningProcesses(self, h):
        self._maybe_fail("processes")
        return [SimpleNamespace(pid=pid, usedGpuMemory=mib * MIB) for pid, mib in self.processes.get(h, [])]


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch):
    for var in (gpu_slots.ENV_PER_JOB, gpu_slots.ENV_HEADROOM, gpu_slots.ENV_MAX_SLOTS, POOL_ID):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(gpu_slots, "cpu_count", lambda: 2)


def test_zero_gpus_falls_back_to_cpu_pool():
    nvml = FakeNVML([])
    assert probe(nvml) == []
    plan = current_plan(nvml)
    assert (plan.kind, plan.total, plan.per_gpu) == ("cpu", 2, [])
    assert "no GPU" in plan.reason
    assert plan.devices() == ["cpu", "cpu"]
    assert nvml.shutdowns == 2


def test_one_gpu():
    nvml = FakeNVML([("NVIDIA H100", 81559, 80000)])
    (g,) = probe(nvml)
    assert g == GpuMemory(0, "NVIDIA H100", 81559, 80000)
    plan = current_plan(nvml, cpu_slots=256)
    assert plan.kind == "cuda"
    assert plan.per_gpu == [(0, 80000, (80000 - 1024) // 600)] and plan.total == 131
    assert plan.devices() == ["cuda:0"] * 131


def test_a_big_card_gets_one_slot_per_core_not_every_slot_its_memory_allows():
    # The GPU check on an H200 with 16 cores (docs/performance.md, GPU): VRAM alone gave 236 slots; 103
    # workers then took 105 of 126 GiB of host memory, ran 3.2x slower than 16 and lost 9 tickers to
    # CUDA out-of-memory. Each worker is a process that needs a core to feed the card.
    nvml = FakeNVML([("NVIDIA H200", 143771, 143155)])
    plan = current_plan(nvml, cpu_slots=16)
    assert (plan.kind, plan.total, plan.per_gpu) == ("cuda", 16, [(0, 143155, 16)])
    assert "one per core (16 cores)" in plan.reason
    # Two cards share the cores, spread round-robin; a card with less room than its share keeps its own.
    two = current_plan(FakeNVML([("A", 80000, 80000), ("B", 80000, 2500)]), cpu_slots=16)
    assert [s for *_, s in two.per_gpu] == [14, 2] and two.total == 16
    # A small card below the cores is untouched by it.
    assert current_plan(FakeNVML([("L4", 23034, 6000)]), cpu_slots=16).total == (6000 - 1024) // 600


def test_several_gpus_spread_and_caps():
    nvml = FakeNVML([("A", 24000, 8000), ("B", 24000, 4000), ("C", 24000, 1500)])
    plan = current_plan(nvml, cpu_slots=64)
    assert [s for *_, s in plan.per_gpu] == [(8000 - 1024) // 600, (4000 - 1024) // 600, 0]
    assert plan.total == 11 + 4
    # The first jobs land on different cards.
    assert plan.devices()[:3] == ["cuda:0", "cuda:1", "cuda:0"]
    capped = plan_slots(probe(nvml), max_total=3, cpu_slots=64)
    assert capped.total == 3 and [s for *_, s in capped.per_gpu] == [2, 1, 0]
    per = plan_slots(probe(nvml), max_per_gpu=2, cpu_slots=64)
    assert [s for *_, s in per.per_gpu] == [2, 2, 0] and per.total == 4


def test_cotenant_holding_most_of_one_gpu_shrinks_only_that_gpu():
    free_before = FakeNVML([("A", 16000, 15000), ("B", 16000, 15000)])
    crowded = FakeNVML([("A", 16000, 15000), ("B", 16000, 1900)])  # a co-tenant took ~13 GB of B
    before, after = current_plan(free_before, cpu_slots=64), current_plan(crowded, cpu_slots=64)
    assert [s for *_, s in before.per_gpu] == [23, 23]
    assert [s for *_, s in after.per_gpu] == [23, 1]
    assert after.total == 24 < before.total
    everything_taken = current_plan(FakeNVML([("A", 16000, 900)]), cpu_slots=2)
    assert everything_taken.kind == "cpu" and everything_taken.total == 2
    assert everything_taken.per_gpu == [(0, 900, 0)] and "none has" in everything_taken.reason


@pytest.mark.parametrize("fail_on", ["init", "count", "handle", "memory"])
@pytest.mark.parametrize("exc", [NVMLError_LibraryNotFound, NVMLError, RuntimeError])
def test_nvml_errors_give_no_gpus_and_a_cpu_pool(fail_on, exc):
    nvml = FakeNVML([("A", 16000, 15000)], fail_on=fail_on, exc=exc)
    assert probe(nvml) == []
    plan = current_plan(nvml)
    assert plan.kind == "cpu" and plan.total >= 1


def test_missing_nvml_module(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_pynvml(name, *a, **k):
        if name == "pynvml":
            raise ImportError("No module named 'pynvml'")
        return real_import(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", no_pynvml)
    assert probe() == []


def test_formula_never_below_zero_and_validates():
    assert plan_slots([GpuMemory(0, "x", 1000, 10)]).per_gpu == [(0, 10, 0)]
    assert plan_slots([GpuMemory(0, "x", 4000, 1024 + 1199)], per_job_mib=600).per_gpu[0][2] == 1
    assert plan_slots([GpuMemory(0, "x", 4000, 1024 + 1200)], per_job_mib=600).per_gpu[0][2] == 2
    with pytest.raises(InputError, match="per-job"):
        plan_slots([], per_job_mib=0)
    with pytest.raises(InputError, match="headroom"):
        plan_slots([], headroom_mib=-1)


def test_cpu_fallback_sizing():
    assert plan_slots([], cpu_slots=8).total == 8
    assert plan_slots([], cpu_slots=8, max_total=3).total == 3
    assert plan_slots([], cpu_slots=0).total == 1  # at least one


def test_env_overrides(monkeypatch):
    nvml = FakeNVML([("A", 16000, 10000)])
    monkeypatch.setenv(gpu_slots.ENV_PER_JOB, "1000")
    monkeypatch.setenv(gpu_slots.ENV_HEADROOM, "2000")
    assert current_plan(nvml, cpu_slots=16).total == 8
    monkeypatch.setenv(gpu_slots.ENV_MAX_SLOTS, "5")
    assert current_plan(nvml, cpu_slots=16).total == 5
    assert current_plan(nvml, cpu_slots=16, max_total=2).total == 2  # explicit beats env
    monkeypatch.setenv(gpu_slots.ENV_PER_JOB, "lots")
    with pytest.raises(InputError, match=gpu_slots.ENV_PER_JOB):
        current_plan(nvml)


def _wait_for_exec(pid: int, program: bytes) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            if Path(f"/proc/{pid}/cmdline").read_bytes().startswith(program):
                return
        time.sleep(0.01)
    raise AssertionError(f"process {pid} did not exec {program!r} within 30 s")


@pytest.fixture
def processes(monkeypatch):
    """Start sleeping processes, marked as the pool's own (`own=True`) or not; killed at the end."""
    monkeypatch.setenv(POOL_ID, "gpu@test-instance")
    started = []

    def start(n: int, own: bool) -> list[int]:
        env = {k: v for k, v in os.environ.items() if k != POOL_ID}
        if own:
            env[POOL_ID] = "gpu@test-instance"
        started.extend(subprocess.Popen(["sleep", "60"], env=env) for _ in range(n))
        pids = [p.pid for p in started[len(started) - n :]]
        for pid in pids:  # until exec, /proc/<pid>/environ is still this process's own environment
            _wait_for_exec(pid, b"sleep")
        return pids

    yield start
    for p in started:
        p.kill()
        p.wait()


@pytest.mark.parametrize("own_jobs", [0, 4, 6, 8])
def test_the_pools_own_jobs_do_not_shrink_its_limit(processes, own_jobs):
    # 6,000 MiB free with none of the pool's jobs running, 16 cores: floor((6000 - 1024) / 600) = 8.
    # Each own job holds 600 MiB: the card shows less free memory, the plan stays at 8 (issue 20 item 3:
    # before, 4 with four running, 2 with six, and the 16-slot CPU plan with eight).
    pids = processes(own_jobs, own=True)
    nvml = FakeNVML([("L4", 23034, 6000 - 600 * own_jobs)], processes={0: [(p, 600) for p in pids]})
    plan = current_plan(nvml, cpu_slots=16)
    assert (plan.kind, plan.total) == ("cuda", 8)
    assert probe(nvml)[0].own_mib == 600 * own_jobs


def test_another_tenants_memory_still_shrinks_the_pool(processes, monkeypatch):
    own = processes(4, own=True)
    [tenant] = processes(1, own=False)  # same host, no marker (another deployment has another one)
    nvml = FakeNVML(
        [("L4", 23034, 6000 - 4 * 600 - 1800)],
        processes={0: [(p, 600) for p in own] + [(tenant, 1800)]},
    )
    # free 1800 + own 2400 = 4200 available to the pool: floor((4200 - 1024) / 600) = 5.
    assert current_plan(nvml, cpu_slots=16).total == 5
    # A process of another deployment (another marker) is another tenant too.
    monkeypatch.setenv(POOL_ID, "gpu@another-instance")
    assert current_plan(nvml, cpu_slots=16).total == (1800 - 1024) // 600
    # Without a marker in our own environment nothing counts as ours (free memory only, as before).
    monkeypatch.delenv(POOL_ID)
    assert current_plan(nvml, cpu_slots=16).total == (1800 - 1024) // 600


def test_an_unreadable_process_list_counts_nothing_as_ours(processes):
    pids = processes(4, own=True)
    nvml = FakeNVML([("L4", 23034, 3600)], processes={0: [(p, 600) for p in pids]}, fail_on="processes")
    plan = current_plan(nvml, cpu_slots=16)
    assert plan.total == (3600 - 1024) // 600  # free memory only, never a failed probe
