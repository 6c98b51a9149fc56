"""glibc malloc settings for a CPU training process (LDTM_TRAINING_MALLOC, default on).

A training step allocates and frees buffers of a few MiB (the LSTM's gates and workspaces, the
epoch's gathered rows). glibc maps each block above its mmap threshold fresh from the kernel and
gives memory above its trim threshold back on free, so every step page-faults the same megabytes in
again. Raising both thresholds keeps those buffers in the heap: the reference step ran 1.4x faster
at batch 32 and 1.6x at batch 128 on a 2-core EPYC (docs/performance.md), for up to
TRIM_THRESHOLD of freed memory kept resident per process. Numerics are untouched: same results.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools

from ldtm_core.config import setting_flag

# mallopt(3) parameters (glibc's malloc.h).
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
# Blocks up to 32 MiB come from the heap (glibc's own ceiling for the dynamic threshold on 64-bit), and
# up to 256 MiB of freed heap top stays mapped.
MMAP_THRESHOLD = 32 * 1024 * 1024
TRIM_THRESHOLD = 256 * 1024 * 1024


@functools.cache
def keep_freed_buffers() -> bool:
    """Apply the settings once per process; True where they took effect (glibc, flag on)."""
    if not setting_flag("LDTM_TRAINING_MALLOC"):
        return False
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc (musl, macOS): nothing to tune
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
