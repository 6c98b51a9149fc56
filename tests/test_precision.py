"""bf16 autocast on CPUs with native bf16 (`ModelConfig.amp`): detection, both decisions of auto, fp32 outputs."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from ldtm_core.data.samples import build_samples
from ldtm_core.data.synthetic import generate
from ldtm_core.learning import precision
from ldtm_core.learning.model import get_profile
from ldtm_core.learning.precision import amp_dtype, cpu_bf16_flags
from ldtm_core.learning.split import purged_split
from ldtm_core.learning.training_loop import fit

CPU = torch.device("cpu")


def cfg(amp: str):
    return get_profile("demo", max_epochs=2, amp=amp)


@pytest.fixture
def native_bf16(monkeypatch):
    def force(value: bool):
        monkeypatch.setattr(precision, "cpu_has_native_bf16", lambda: value)

    return force


def test_auto_follows_the_detection_and_bf16_off_force(native_bf16):
    native_bf16(True)
    assert amp_dtype(cfg("auto"), CPU) is torch.bfloat16
    assert amp_dtype(cfg("off"), CPU) is None
    native_bf16(False)
    assert amp_dtype(cfg("auto"), CPU) is None
    assert amp_dtype(cfg("bf16"), CPU) is torch.bfloat16
    assert amp_dtype(cfg("fp16"), CPU) is None  # fp16 autocast is a CUDA setting


def test_cpu_flags_are_read_from_cpuinfo(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("model name\t: X\nflags\t\t: fpu sse avx512f avx512_bf16 amx_tile amx_bf16\n")
    assert cpu_bf16_flags(info) == ("avx512_bf16", "amx_bf16")
    info.write_text("model name\t: EPYC\nflags\t\t: fpu sse avx2 avx512f avx512bw\n")
    assert cpu_bf16_flags(info) == ()
    assert cpu_bf16_flags(tmp_path / "missing") == ()


def test_detection_needs_amx(monkeypatch):
    precision.cpu_has_native_bf16.cache_clear()
    try:
        monkeypatch.setattr(precision, "cpu_bf16_flags", lambda: ("avx512_bf16",))
        assert precision.cpu_has_native_bf16() is False  # measured slower than fp32 without AMX
        precision.cpu_has_native_bf16.cache_clear()
        monkeypatch.setattr(precision, "cpu_bf16_flags", lambda: ("avx512_bf16", "amx_bf16"))
        expected = bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
        assert precision.cpu_has_native_bf16() is expected
    finally:
        precision.cpu_has_native_bf16.cache_clear()


@pytest.mark.parametrize("native", [True, False])
def test_fit_trains_in_the_detected_precision_and_returns_fp32_weights(native_bf16, native):
    native_bf16(native)
    torch.set_num_threads(1)
    df = generate(["AAPL"], "2022-01-03", "2023-06-30", seed=1).drop(columns="ticker")
    s = build_samples(df, 30)
    tr, va = purged_split(s, 0.15)
    res = fit(s.subset(tr), s.subset(va), cfg("auto"), threads=1)
    assert res.precision == ("bf16" if native else "fp32")
    assert all(p.dtype == torch.float32 for p in res.model.state_dict().values())
    # Validation is scored in fp32 whatever the step ran in: re-scoring the returned model agrees.
    from ldtm_core.learning.training_loop import _labeled_tensors, evaluate

    x, y = _labeled_tensors(s.subset(va), "validation")
    assert evaluate(res.model, x, y) == pytest.approx(res.val_loss, rel=1e-6)
    off = fit(s.subset(tr), s.subset(va), dataclasses.replace(cfg("auto"), amp="off"), threads=1)
    assert off.precision == "fp32"
    if native:  # bf16 rounding changes the trajectory; fp32 weights differ from the forced-off run
        assert res.val_loss != off.val_loss
    else:
        assert res.val_loss == off.val_loss
