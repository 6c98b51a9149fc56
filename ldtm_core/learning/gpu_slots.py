"""How many training/inference jobs fit at once, derived from free VRAM (SPEC §6).

Per GPU: `slots = floor((free_MiB + own_MiB - headroom_MiB) / per_job_MiB)`, never below 0, capped by
config. The sum, at most one per CPU core (each slot is a process feeding the card), is the pool
limit. No NVML, no GPU, or no GPU with room -> a CPU pool sized from the cores. NVML is read through an injectable module so tests can play zero, one, several or crowded GPUs.

`own_MiB` is the memory the pool's own running jobs hold (NVML per-process usage), so the limit is
stable under the pool's own load and shrinks only for other tenants. A process is the pool's own when
its environment (`/proc/<pid>/environ`, as it was started) carries `LDTM_GPU_POOL_ID` with the same
value as ours: the Dagster code location sets it (`ldtm_dagster/gpu_pool.py: mark_pool_processes`) and every run worker, step
process and ticker-pool worker started after that inherits it. Where the variable is unset, or a
process's environment cannot be read (another user, PIDs of another namespace in a container), that
process counts as another tenant: the limit is then what free memory alone allows, never higher.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field

from ldtm_core.config import env_text
from ldtm_core.errors import InputError

DEFAULT_PER_JOB_MIB = 600
DEFAULT_HEADROOM_MIB = 1024
ENV_PER_JOB = "LDTM_GPU_PER_JOB_MIB"
ENV_HEADROOM = "LDTM_GPU_HEADROOM_MIB"
ENV_MAX_SLOTS = "LDTM_GPU_MAX_SLOTS"
ENV_POOL_ID = "LDTM_GPU_POOL_ID"
# NVML's "not available" for a process's memory (no per-process accounting, e.g. some containers).
_NOT_AVAILABLE = 2**64 - 1


@dataclass(frozen=True)
class GpuMemory:
    index: int
    name: str
    total_mib: int
    free_mib: int
    own_mib: int = 0  # held by the pool's own running processes: available to the pool

    @property
    def available_mib(self) -> int:
        return self.free_mib + self.own_mib


@dataclass(frozen=True)
class SlotPlan:
    per_gpu: list[tuple[int, int, int]] = field(default_factory=list)  # (index, free_mib, slots)
    total: int = 1
    kind: str = "cpu"  # 'cuda' | 'cpu'
    reason: str = ""

    def devices(self) -> list[str]:
        """One device string per slot, interleaved across GPUs so the first jobs land on different cards."""
        if self.kind != "cuda":
            return ["cpu"] * self.total
        remaining = {idx: slots for idx, _free, slots in self.per_gpu}
        out: list[str] = []
        while any(remaining.values()):
            for idx, _free, _slots in self.per_gpu:
                if remaining[idx] > 0:
                    out.append(f"cuda:{idx}")
                    remaining[idx] -= 1
        return out


def cpu_count() -> int:
    """Cores this process may use (affinity-aware where the OS tells us)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def _mib(value: int) -> int:
    return int(value) // (1024 * 1024)


def is_pool_process(pid: int, pool_id: str) -> bool:
    """Whether process `pid` was started with LDTM_GPU_POOL_ID=`pool_id` (False when unreadable)."""
    try:
        with open(f"/proc/{int(pid)}/environ", "rb") as f:
            environ = f.read()
    except (OSError, ValueError):
        return False
    return f"{ENV_POOL_ID}={pool_id}".encode() in environ.split(b"\0")


def _own_mib(nvml, handle, is_own) -> int:
    """MiB held on this GPU by the pool's own processes; 0 when NVML cannot list them."""
    try:
        procs = nvml.nvmlDeviceGetComputeRunningProcesses(handle)
    except Exception:  # noqa: BLE001 - no per-process view: count nothing as ours (the safe side)
        return 0
    used = 0
    for p in procs:
        memory = getattr(p, "usedGpuMemory", None)
        if memory is not None and memory != _NOT_AVAILABLE and is_own(int(p.pid)):
            used += int(memory)
    return _mib(used)


def probe(nvml=None) -> list[GpuMemory]:
    """Free/total memory of every GPU NVML sees, with what the pool's own processes hold there;
    [] when NVML is missing or fails in any way."""
    if nvml is None:
        try:
            import pynvml as nvml  # the maintained module of the nvidia-ml-py package
        except Exception:  # noqa: BLE001 - no NVML bindings at all means no GPU for us
            return []
    try:
        nvml.nvmlInit()
    except Exception:  # noqa: BLE001 - NVMLError_LibraryNotFound / DriverNotLoaded on CPU machines
        return []
    pool_id = env_text(ENV_POOL_ID)
    is_own = (lambda pid: is_pool_process(pid, pool_id)) if pool_id else (lambda _pid: False)
    try:
        gpus = []
        for i in range(int(nvml.nvmlDeviceGetCount())):
            handle = nvml.nvmlDeviceGetHandleByIndex(i)
            mem = nvml.nvmlDeviceGetMemoryInfo(handle)
            name = nvml.nvmlDeviceGetName(handle)
            if isinstance(name, bytes):  # older bindings return bytes
                name = name.decode(errors="replace")
            gpus.append(
                GpuMemory(
                    index=i,
                    name=str(name),
                    total_mib=_mib(mem.total),
                    free_mib=_mib(mem.free),
                    own_mib=_own_mib(nvml, handle, is_own),
                )
            )
        return gpus
    except Exception:  # noqa: BLE001 - a GPU that cannot be queried is not one we can schedule on
        return []
    finally:
        # Shutting down a half-initialised NVML must not mask the result.
        with contextlib.suppress(Exception):
            nvml.nvmlShutdown()


def plan_slots(
    gpus: list[GpuMemory],
    per_job_mib: int = DEFAULT_PER_JOB_MIB,
    headroom_mib: int = DEFAULT_HEADROOM_MIB,
    max_per_gpu: int | None = None,
    max_total: int | None = None,
    cpu_slots: int | None = None,
) -> SlotPlan:
    """The slot plan for these GPUs; a CPU plan (at least 1 slot) when none has room."""
    if per_job_mib <= 0:
        raise InputError(f"per-job GPU memory must be > 0 MiB, got {per_job_mib}")
    if headroom_mib < 0:
        raise InputError(f"GPU headroom must be >= 0 MiB, got {headroom_mib}")
    for name, cap in (("max_per_gpu", max_per_gpu), ("max_total", max_total), ("cpu_slots", cpu_slots)):
        if cap is not None and cap < 0:
            raise InputError(f"{name} must be >= 0, got {cap}")

    raw = []
    for g in gpus:
        slots = max(0, (g.available_mib - headroom_mib) // per_job_mib)
        if max_per_gpu is not None:
            slots = min(slots, max_per_gpu)
        raw.append((g.index, g.free_mib, int(slots)))

    # Each slot is a process that needs a core to feed the card: on a big card VRAM alone allowed 236
    # slots on 16 cores, and 103 workers ran 3.2x slower than 16 and ran out of memory (docs/performance.md).
    cores = cpu_count() if cpu_slots is None else cpu_slots
    vram_total = sum(s for *_, s in raw)
    by_cores = vram_total > max(1, cores) and (max_total is None or max_total > max(1, cores))
    # Apply the total caps round-robin so a capped pool still spreads over the cards.
    budget = min(vram_total, max(1, cores), *([max_total] if max_total is not None else []))
    granted = {idx: 0 for idx, _, _ in raw}
    left = budget
    while left > 0:
        progressed = False
        for idx, _free, slots in raw:
            if left > 0 and granted[idx] < slots:
                granted[idx] += 1
                left -= 1
                progressed = True
        if not progressed:
            break
    per_gpu = [(idx, free, granted[idx]) for idx, free, _ in raw]
    total = sum(granted.values())
    if total > 0:
        return SlotPlan(
            per_gpu=per_gpu,
            total=total,
            kind="cuda",
            reason=f"{len(gpus)} GPU(s): floor((free + own - {headroom_mib}) / {per_job_mib}) MiB per GPU"
            + (f", own jobs hold {own} MiB" if (own := sum(g.own_mib for g in gpus)) else "")
            + (f", at most one per core ({max(1, cores)} cores)" if by_cores else "")
            + (f", capped at {max_total} in total" if max_total is not None else "")
            + (f", at most {max_per_gpu} per GPU" if max_per_gpu is not None else ""),
        )

    n_cpu = max(1, min(cores, max_total) if max_total else cores)
    if not gpus:
        why = "no GPU visible through NVML"
    else:
        why = f"{len(gpus)} GPU(s) but none has {headroom_mib} + {per_job_mib} MiB free"
    return SlotPlan(
        per_gpu=per_gpu, total=n_cpu, kind="cpu", reason=f"{why}: CPU pool of {n_cpu} (1 thread each)"
    )


def _env_int(name: str) -> int | None:
    raw = env_text(name)
    if raw is None or raw.strip() == "":
        return None
    try:
        value = int(raw)
    except ValueError:
        raise InputError(f"{name}={raw!r} is not an integer") from None
    if value < 0:
        raise InputError(f"{name}={raw!r} must be >= 0")
    return value


def current_plan(nvml=None, **kw) -> SlotPlan:
    """plan_slots(probe()) with LDTM_GPU_PER_JOB_MIB / LDTM_GPU_HEADROOM_MIB / LDTM_GPU_MAX_SLOTS applied.

    Explicit keyword arguments win over the environment, which wins over the defaults.
    """
    env = {
        "per_job_mib": _env_int(ENV_PER_JOB),
        "headroom_mib": _env_int(ENV_HEADROOM),
        "max_total": _env_int(ENV_MAX_SLOTS),
    }
    for key, value in env.items():
        if value is not None:
            kw.setdefault(key, value)
    return plan_slots(probe(nvml), **kw)
