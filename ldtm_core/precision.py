"""Which autocast dtype a training step runs under (`ModelConfig.amp`).

CUDA: bf16 where the card supports it, else fp16. CPU: bf16 only where the CPU does bf16 natively
(AVX512-BF16 or AMX); elsewhere it is emulated and no faster, so fp32. The decision is detected,
never guessed from the vendor. Only the training step changes: validation, checkpoints, ONNX export
and inference stay fp32.
"""

from __future__ import annotations

import functools
from pathlib import Path

import torch

from .model import ModelConfig

# /proc/cpuinfo flags of native bf16 arithmetic (AVX512-BF16 dot products, AMX tiles).
BF16_CPU_FLAGS = ("avx512_bf16", "amx_bf16")


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
def cpu_has_native_bf16() -> bool:
    """oneDNN's own answer where torch has it, else the CPU flags."""
    probe = getattr(getattr(torch.ops, "mkldnn", None), "_is_mkldnn_bf16_supported", None)
    if probe is not None:
        try:
            # oneDNN answers True for AVX512-BW/VL/DQ too (emulated bf16): require a native flag as well.
            return bool(probe()) and bool(cpu_bf16_flags())
        except RuntimeError:
            pass
    return bool(cpu_bf16_flags())


def amp_dtype(cfg: ModelConfig, device: torch.device) -> torch.dtype | None:
    """Autocast dtype for the training step, or None for plain fp32."""
    if cfg.amp == "off":
        return None
    if device.type == "cpu":
        if cfg.amp == "bf16" or (cfg.amp == "auto" and cpu_has_native_bf16()):
            return torch.bfloat16
        return None  # fp16 autocast on a CPU is slower than fp32; 'fp16' is a CUDA setting
    if cfg.amp == "fp16":
        return torch.float16
    if cfg.amp == "bf16":
        return torch.bfloat16
    return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16


def precision_name(dtype: torch.dtype | None) -> str:
    return {torch.bfloat16: "bf16", torch.float16: "fp16"}.get(dtype, "fp32")


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
