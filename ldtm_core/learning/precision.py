"""Which autocast dtype a training step runs under (`ModelConfig.amp`).

CUDA: bf16 (fp16 on a card without bf16) where a few timed reference training steps find it faster on
this card, else fp32 with TF32 (on an H200 the small LSTM was 0.67-0.73x slower under autocast: the GPU
check, docs/performance.md). CPU: bf16 where it is faster here, detected, never guessed from the vendor.
Measured (docs/performance.md): with AMX bf16 tiles (`amx_bf16`) the
reference training step is 1.6-2.5x faster in bf16; with AVX512-BF16 but no AMX it depends on the
core (a Xeon: ~0.85x, slower; an AMD EPYC Zen 5: 1.36x at batch 32), so there `auto` times a few
reference training steps in both precisions once per CPU model and torch version and caches the
answer (`LDTM_CACHE_DIR`, default ~/.cache/ldtm); LDTM_BF16_PROBE=0 skips the probe (fp32). Without
either flag bf16 is emulated: fp32. `amp=bf16` / `amp=off` force either. Only the training step
changes: validation, checkpoints, ONNX export and inference stay fp32.
"""

from __future__ import annotations

import functools
import json
import os
import time
from pathlib import Path

import torch

from ldtm_core.config import env_text, setting_flag
from ldtm_core.errors import InputError
from ldtm_core.learning.model import ModelConfig

# /proc/cpuinfo flags of native bf16 arithmetic (AVX512-BF16 dot products, AMX tiles), for reports.
BF16_CPU_FLAGS = ("avx512_bf16", "amx_bf16")
# The one that makes bf16 training faster than fp32 wherever measured; AVX512-BF16 alone is probed.
FAST_BF16_FLAG = "amx_bf16"
# bf16 must beat fp32 by this much in the probe: below it the difference is noise, not a reason.
PROBE_MIN_SPEEDUP = 1.1


def cpu_bf16_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> tuple[str, ...]:
    """The native-bf16 flags this CPU advertises (empty where none, or no /proc/cpuinfo)."""
    try:
        text = cpuinfo.read_text()
    except OSError:
        return ()
    for line in text.splitlines():
        if line.startswith("flags"):
            present = set(line.split(":", 1)[1].split())
            return tuple(f for f in BF16_CPU_FLAGS if f in present)
    return ()


@functools.cache
def cpu_can_run_bf16() -> bool:
    """True where oneDNN has bf16 kernels at all (native or emulated: AVX-512 and up). Without them
    (an AVX2-only CPU such as an EPYC Zen 3) a bf16 LSTM step fails inside oneDNN."""
    probe = getattr(getattr(torch.ops, "mkldnn", None), "_is_mkldnn_bf16_supported", None)
    try:
        return bool(probe()) if probe is not None else False
    except RuntimeError:
        return False


def no_bf16_kernels() -> str:
    """Why bf16 cannot train on this CPU, for messages (where `cpu_can_run_bf16()` is False)."""
    return f"this CPU ({describe_cpu()}) has no bf16 kernels in oneDNN (they need AVX-512)"


@functools.cache
def cpu_has_native_bf16() -> bool:
    """True where bf16 training is faster here: oneDNN able to use bf16, and AMX bf16 in the CPU flags,
    or AVX512-BF16 whose probe measured bf16 faster than fp32 on this CPU."""
    flags = cpu_bf16_flags()
    if not flags or not cpu_can_run_bf16():
        return False
    if FAST_BF16_FLAG in flags:
        return True
    return bf16_probe_speedup() >= PROBE_MIN_SPEEDUP


def _probe_cache() -> Path:
    root = (
        env_text("LDTM_CACHE_DIR")
        or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "ldtm"
    )
    return Path(root) / "bf16_probe.json"


def _cached_speedup(key: str, measure) -> float:
    """`measure()` once per key (CPU or card, torch version), kept in the probe's cache file;
    0.0 with LDTM_BF16_PROBE=0."""
    if not setting_flag("LDTM_BF16_PROBE"):
        return 0.0
    path = _probe_cache()
    try:
        cached = json.loads(path.read_text())
    except (OSError, ValueError):
        cached = {}
    if not isinstance(cached, dict):
        cached = {}
    if isinstance(cached.get(key), int | float):
        return float(cached[key])
    speedup = measure()
    try:  # best effort: a read-only home just means probing again next process
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps({**cached, key: round(speedup, 3)}, indent=1))
        tmp.replace(path)
    except OSError:
        pass
    return speedup


def bf16_probe_speedup() -> float:
    """bf16/fp32 speed of the reference training step on this CPU: cached per CPU and torch version,
    measured on first use (about a second). 0.0 with LDTM_BF16_PROBE=0."""
    key = f"{describe_cpu()} {cpu_generation()} | torch {torch.__version__}"
    return _cached_speedup(key, measure_bf16_speedup)


def cuda_amp_speedup(device: torch.device, dtype: torch.dtype) -> float:
    """fp32/`dtype` time of the reference training step (batch 128, the reference recipe's) on this
    card: cached per card, dtype and torch version. On an H200 the small LSTM ran at 0.67-0.73x in bf16
    and fp16 (launch-bound: autocast adds casts, tensor cores have little to do), so it is measured."""
    name = torch.cuda.get_device_name(device)
    key = f"{name} {precision_name(dtype)} | torch {torch.__version__}"
    return _cached_speedup(key, lambda: measure_speedup(device, dtype, batch=128))


def measure_bf16_speedup(batch: int = 32, steps: int = 12, rounds: int = 2) -> float:
    """fp32 time / bf16 time of the reference model's training step on this CPU, one thread;
    0.0 where this CPU cannot run bf16 at all."""
    if not cpu_can_run_bf16():
        return 0.0
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return measure_speedup(torch.device("cpu"), torch.bfloat16, batch=batch, steps=steps, rounds=rounds)
    finally:
        torch.set_num_threads(threads)


def measure_speedup(
    device: torch.device, dtype: torch.dtype, batch: int = 32, steps: int = 12, rounds: int = 2
) -> float:
    """fp32 time / `dtype`-autocast time of the reference model's training step (AdamW) on `device`,
    the two interleaved over the same tensors."""
    from ldtm_core.learning.model import LDTM, get_profile

    cfg = get_profile("reference")
    torch.manual_seed(0)
    model = LDTM(cfg).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr)
    x = torch.randn(batch, cfg.window, cfg.input_size, device=device)
    y = torch.randn(batch, len(cfg.horizons), device=device)
    sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)

    def run(low: torch.dtype | None, n: int) -> float:
        sync()
        t0 = time.perf_counter()
        for _ in range(n):
            with torch.autocast(device.type, dtype=low or torch.float32, enabled=low is not None):
                loss = torch.nn.functional.mse_loss(model(x).float(), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        sync()
        return time.perf_counter() - t0

    elapsed = {None: 0.0, dtype: 0.0}
    for low in elapsed:  # kernel creation (and cuDNN's plans) stays out of the timing
        run(low, 2)
    for _ in range(rounds):
        for low in elapsed:
            elapsed[low] += run(low, steps)
    return elapsed[None] / elapsed[dtype]


def amp_dtype(cfg: ModelConfig, device: torch.device) -> torch.dtype | None:
    """Autocast dtype for the training step, or None for plain fp32."""
    if cfg.amp == "off":
        return None
    if device.type == "cpu":
        if cfg.amp == "bf16" and not cpu_can_run_bf16():
            raise InputError(
                f"amp=bf16: {no_bf16_kernels()}, so the LSTM cannot train in bf16 here; use amp=auto "
                "(fp32 on this CPU) or amp=off"
            )
        if cfg.amp == "bf16" or (cfg.amp == "auto" and cpu_has_native_bf16()):
            return torch.bfloat16
        return None  # fp16 autocast on a CPU is slower than fp32; 'fp16' is a CUDA setting
    if cfg.amp == "fp16":
        return torch.float16
    if cfg.amp == "bf16":
        return torch.bfloat16
    low = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return low if cuda_amp_speedup(device, low) >= PROBE_MIN_SPEEDUP else None


# The training step's precisions by name: the autocast dtype each runs under (fp32: none).
PRECISIONS: dict[str, torch.dtype | None] = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}


def precision_name(dtype: torch.dtype | None) -> str:
    return next((name for name, d in PRECISIONS.items() if d == dtype), "fp32")


def cpu_generation(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """`family 25 model 17`: VMs often report one model name ("AMD EPYC") for several core generations,
    and bf16 speed differs between them (Zen 4 vs Zen 5), so the probe's cache tells them apart."""
    found = {}
    try:
        for line in cpuinfo.read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() in ("cpu family", "model") and key.strip() not in found:
                found[key.strip()] = value.strip()
            if len(found) == 2:
                break
    except OSError:
        pass
    return f"family {found.get('cpu family', '?')} model {found.get('model', '?')}"


def describe_cpu() -> str:
    """`lscpu`-style model name plus the native bf16 flags, for benchmark reports."""
    name = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                name = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    flags = ", ".join(cpu_bf16_flags()) or "no native bf16"
    return f"{name} ({flags})"
