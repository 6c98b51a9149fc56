"""A stand-in for NVML in the GPU check's CPU dry run (`scripts/gpu_check.sh --cpu`): one 16 GiB card,
15,000 MiB free, no processes. torch sees no CUDA there, so the pool trains on the CPU, as on any host
whose NVML sees a card its torch build cannot use; the slot plan, `ldtm gpu slots` and the check's
NVML sampler still run their whole path."""

from types import SimpleNamespace

MIB = 1024 * 1024
TOTAL_MIB, FREE_MIB = 16384, 15000


class NVMLError(Exception):
    pass


def nvmlInit():
    pass


def nvmlShutdown():
    pass


def nvmlSystemGetDriverVersion():
    return "fake (gpu_check --cpu)"


def nvmlDeviceGetCount():
    return 1


def nvmlDeviceGetHandleByIndex(i):
    if i != 0:
        raise NVMLError(f"no GPU {i}")
    return i


def nvmlDeviceGetName(_handle):
    return "Fake GPU (gpu_check --cpu)"


def nvmlDeviceGetMemoryInfo(_handle):
    return SimpleNamespace(total=TOTAL_MIB * MIB, free=FREE_MIB * MIB, used=(TOTAL_MIB - FREE_MIB) * MIB)


def nvmlDeviceGetComputeRunningProcesses(_handle):
    return []
