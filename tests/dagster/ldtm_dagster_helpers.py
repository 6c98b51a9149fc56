"""Helpers for the Dagster tests: a fake NVML, tiny resources, the repo's instance config."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path
from types import SimpleNamespace

import yaml
from dagster import DagsterInstance

from ldtm_dagster.resources import AppDatabase, ArtifactStore, GpuProbe, TrainingProfile

REPO = Path(__file__).resolve().parents[2]
MIB = 1024 * 1024
# Three contiguous demo partitions (AAPL, NVDA, TSLA): a range run covers exactly these.
TICKERS = "AAPL,NVDA,TSLA"


class FakeNVML:
    """The part of pynvml that gpu_slots.probe reads; `gpus` is [(name, total_mib, free_mib)]."""

    def __init__(self, gpus, broken: bool = False, processes=None):
        self.gpus, self.broken = list(gpus), broken
        self.processes = processes or {}  # {gpu index: [(pid, used_mib)]}

    def nvmlInit(self):
        if self.broken:
            raise RuntimeError("NVML Shared Library Not Found")

    def nvmlShutdown(self):
        pass

    def nvmlDeviceGetCount(self):
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlDeviceGetMemoryInfo(self, h):
        _, total, free = self.gpus[h]
        return SimpleNamespace(total=total * MIB, free=free * MIB, used=(total - free) * MIB)

    def nvmlDeviceGetName(self, h):
        return self.gpus[h][0]

    def nvmlDeviceGetComputeRunningProcesses(self, h):
        return [SimpleNamespace(pid=pid, usedGpuMemory=mib * MIB) for pid, mib in self.processes.get(h, [])]


FAKE_NVML = {"module": FakeNVML([], broken=True)}


class FakeGpuProbe(GpuProbe):
    """GpuProbe reading the test's fake NVML instead of the driver."""

    def nvml_module(self):
        return FAKE_NVML["module"]


def repo_instance_config(path: str = "dagster.yaml") -> dict:
    return yaml.safe_load((REPO / path).read_text())


def dagster_cli_env(tmp_path: Path, run_monitoring: dict | None = None, **ldtm: str) -> dict[str, str]:
    """Environment for a real `dagster` / `dagster-daemon` / `dagster-webserver` subprocess: its own
    DAGSTER_HOME under `tmp_path` holding the repo's dagster.yaml (with `run_monitoring` settings
    merged in), LDTM_HOME beside it, and `ldtm` as LDTM_* variables (database_url -> LDTM_DATABASE_URL)."""
    home = tmp_path / "dagster_home"
    home.mkdir()
    config = repo_instance_config()
    config["run_monitoring"].update(run_monitoring or {})
    (home / "dagster.yaml").write_text(yaml.safe_dump(config))
    # Create the instance's SQLite storages now: a daemon and a CLI started together would otherwise
    # both create and stamp them, and alembic then refuses the doubly stamped database.
    with DagsterInstance.from_config(str(home)):
        pass
    return {
        **os.environ,
        "DAGSTER_HOME": str(home),
        "LDTM_HOME": str(tmp_path / "ldtm"),
        **{f"LDTM_{k.upper()}": str(v) for k, v in ldtm.items()},
    }


def tiny_resources(home: Path, url: str, universe: str = TICKERS, gpu: GpuProbe | None = None) -> dict:
    return {
        "store": ArtifactStore(home=str(home), universe=universe),
        "database": AppDatabase(url=url),
        "training": TrainingProfile(profile="demo", max_epochs=1),
        "gpu": gpu or GpuProbe(),
    }


def stop_group(proc, timeout: float) -> None:
    """SIGTERM the process group a test started (start_new_session=True), SIGKILL it if it lingers."""
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def process_tree(pid: int) -> list[int]:
    """Every descendant of `pid` (Linux /proc), children before grandchildren."""
    out = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        out += [int(k) for k in (task / "children").read_text().split()]
    return out + [g for k in out for g in process_tree(k)]


def step_processes(worker: int) -> list[int]:
    """The processes a run worker's steps run in (and theirs): its descendants, less multiprocessing's own
    helpers among its children, the forkserver and the resource tracker, which live as long as the run
    worker does (the steps the forkserver forked carry its command line too, so only children are sorted)."""
    helpers = set()
    for child in process_tree_children(worker):
        try:
            cmdline = Path(f"/proc/{child}/cmdline").read_bytes()
        except OSError:
            continue
        if b"multiprocessing.forkserver" in cmdline or b"multiprocessing.resource_tracker" in cmdline:
            helpers.add(child)
    return [p for p in process_tree(worker) if p not in helpers]


def process_tree_children(pid: int) -> list[int]:
    out = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        out += [int(k) for k in (task / "children").read_text().split()]
    return out


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def wait_dead(pids, seconds: float) -> list[int]:
    """The pids still alive after up to `seconds`."""
    deadline = time.monotonic() + seconds
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    return [p for p in pids if alive(p)]
