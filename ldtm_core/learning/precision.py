"""Which autocast dtype a training step runs under (`ModelConfig.amp`).

CUDA: bf16 where the card supports it, else fp16. CPU: bf16 only where the CPU has AMX bf16 tiles
(`amx_bf16`); the decision is detected from the CPU's flags, never guessed from the vendor. Measured
(docs/performance.md): with AMX the reference training step is 1.6-2.5x faster in bf16; on a Xeon
with AVX512-BF16 but no AMX it is ~0.85x (slower), and without either bf16 is emulated. So `auto`
needs AMX; `amp=bf16` still forces it anywhere. Only the training step changes: validation,
checkpoints, ONNX export and inference stay fp32.
"""

from __future__ import annotations

import functools
from pathlib import Path

import torch

from ldtm_core.learning.model import ModelConfig

# /proc/cpuinfo flags of native bf16 arithmetic (AVX512-BF16 dot products, AMX tiles), for reports.
BF16_CPU_FLAGS = ("avx512_bf16", "amx_bf16")
# The one that makes bf16 training faster than fp32 here (AVX512-BF16 alone measured slower).
FAST_BF16_FLAG = "amx_bf16"


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
    """True where bf16 training is fast here: AMX bf16 in the CPU flags and oneDNN able to use bf16."""
    if FAST_BF16_FLAG not in cpu_bf16_flags():
        return False
    probe = getattr(getattr(torch.ops, "mkldnn", None), "_is_mkldnn_bf16_supported", None)
    try:
        return bool(probe()) if probe is not None else True
    except RuntimeError:
        return False


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
