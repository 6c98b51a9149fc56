"""bf16 autocast on CPUs with native bf16 (`ModelConfig.amp`): detection, both decisions of auto, fp32 outputs."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from ldtm_core.data.samples import build_samples
from ldtm_core.data.synthetic_market import generate
from ldtm_core.errors import InputError
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


def test_auto_follows_the_detection_and_bf16_off_force(native_bf16, monkeypatch):
    monkeypatch.setattr(precision, "cpu_can_run_bf16", lambda: True)  # a forced bf16 runs where oneDNN can
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


@pytest.fixture
def fresh_detection():
    precision.cpu_has_native_bf16.cache_clear()
    yield
    precision.cpu_has_native_bf16.cache_clear()


def test_detection_amx_yes_avx512_bf16_by_probe_none_no(monkeypatch, fresh_detection):
    onednn = bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    monkeypatch.setattr(precision, "cpu_bf16_flags", lambda: ())
    monkeypatch.setattr(precision, "bf16_probe_speedup", lambda: 9.0)
    assert precision.cpu_has_native_bf16() is False  # emulated bf16: never, whatever a probe says
    for flags, speedup, expected in (
        (("avx512_bf16",), 0.85, False),  # a Xeon without AMX: measured slower
        (("avx512_bf16",), 1.36, onednn),  # an AMD EPYC Zen 5: measured faster
        (("avx512_bf16", "amx_bf16"), 0.0, onednn),  # AMX: faster wherever measured, no probe
    ):
        precision.cpu_has_native_bf16.cache_clear()
        monkeypatch.setattr(precision, "cpu_bf16_flags", lambda f=flags: f)
        monkeypatch.setattr(precision, "bf16_probe_speedup", lambda s=speedup: s)
        assert precision.cpu_has_native_bf16() is expected, (flags, speedup)


def test_probe_measures_once_per_cpu_and_torch_then_reads_its_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("LDTM_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("LDTM_BF16_PROBE", "1")
    calls = []
    monkeypatch.setattr(precision, "measure_bf16_speedup", lambda: calls.append(1) or 1.42)
    assert precision.bf16_probe_speedup() == pytest.approx(1.42)
    assert precision.bf16_probe_speedup() == pytest.approx(1.42)
    assert len(calls) == 1  # the second answer came from the cache file
    (cached,) = json.loads((tmp_path / "cache" / "bf16_probe.json").read_text()).items()
    assert cached[0].endswith(f"torch {torch.__version__}") and cached[1] == pytest.approx(1.42)
    (tmp_path / "cache" / "bf16_probe.json").write_text("not json")  # a damaged cache: measured again
    assert precision.bf16_probe_speedup() == pytest.approx(1.42) and len(calls) == 2
    monkeypatch.setenv("LDTM_BF16_PROBE", "0")
    assert precision.bf16_probe_speedup() == 0.0 and len(calls) == 2


def test_probe_cache_tells_core_generations_with_one_model_name_apart(tmp_path):
    zen4, zen5 = tmp_path / "zen4", tmp_path / "zen5"
    zen4.write_text("processor\t: 0\ncpu family\t: 25\nmodel\t\t: 17\nmodel name\t: AMD EPYC\n")
    zen5.write_text("processor\t: 0\ncpu family\t: 26\nmodel\t\t: 2\nmodel name\t: AMD EPYC\n")
    assert precision.cpu_generation(zen4) == "family 25 model 17"
    assert precision.cpu_generation(zen5) == "family 26 model 2"
    assert precision.cpu_generation(tmp_path / "missing") == "family ? model ?"


def test_the_probe_times_real_training_steps_and_restores_the_thread_count():
    threads = torch.get_num_threads()
    speedup = precision.measure_bf16_speedup(batch=8, steps=1, rounds=1)
    # 0.0 (nothing to time) where oneDNN has no bf16 kernels: an AVX2-only CPU
    assert (speedup > 0) is precision.cpu_can_run_bf16() and torch.get_num_threads() == threads


def test_forced_bf16_on_a_cpu_without_bf16_kernels_is_refused_by_name(monkeypatch):
    monkeypatch.setattr(precision, "cpu_can_run_bf16", lambda: False)
    with pytest.raises(InputError, match=r"amp=bf16: this CPU .* amp=auto"):
        amp_dtype(cfg("bf16"), CPU)
    assert amp_dtype(cfg("off"), CPU) is None
    assert precision.measure_bf16_speedup(batch=8, steps=1, rounds=1) == 0.0


@pytest.mark.parametrize("native", [True, False])
def test_fit_trains_in_the_detected_precision_and_returns_fp32_weights(native_bf16, native):
    if native and not precision.cpu_can_run_bf16():
        pytest.skip("this CPU has no bf16 kernels in oneDNN (AVX2 only): bf16 cannot train here")
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


CUDA = torch.device("cuda", 0)


@pytest.fixture
def card(monkeypatch, tmp_path):
    """A CUDA card as amp_dtype sees it, on a CPU machine: its name, bf16 support, the probe's answer."""
    monkeypatch.setenv("LDTM_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("LDTM_BF16_PROBE", "1")  # the suite turns the probe off; this is its test
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda _d=None: "NVIDIA H200")
    state = {"bf16": True, "speedup": 0.7, "measured": []}
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: state["bf16"])

    def measure(device, dtype, **_kw):
        state["measured"].append((str(device), dtype))
        return state["speedup"]

    monkeypatch.setattr(precision, "measure_speedup", measure)
    return state


def test_auto_on_a_card_trains_in_fp32_where_the_probe_finds_amp_slower(card):
    # The GPU check on an H200 (docs/performance.md, GPU): the reference step ran at 0.67-0.73x in bf16
    # or fp16 at batch 32, 128 and 512; auto used to pick bf16 on every card that has it.
    assert amp_dtype(cfg("auto"), CUDA) is None
    assert card["measured"] == [("cuda:0", torch.bfloat16)]
    amp_dtype(cfg("auto"), CUDA)
    assert len(card["measured"]) == 1  # cached per card and torch version
    assert amp_dtype(cfg("bf16"), CUDA) is torch.bfloat16  # forcing still works
    assert amp_dtype(cfg("fp16"), CUDA) is torch.float16
    assert amp_dtype(cfg("off"), CUDA) is None


def test_auto_on_a_card_uses_amp_where_the_probe_finds_it_faster(card, monkeypatch, tmp_path):
    card["speedup"] = 1.6
    assert amp_dtype(cfg("auto"), CUDA) is torch.bfloat16
    card["bf16"] = False  # a card without bf16 (pre-Ampere) is probed, and trains, in fp16
    monkeypatch.setenv("LDTM_CACHE_DIR", str(tmp_path / "other"))
    assert amp_dtype(cfg("auto"), CUDA) is torch.float16
    assert card["measured"][-1] == ("cuda:0", torch.float16)
    monkeypatch.setenv("LDTM_BF16_PROBE", "0")  # no probe: fp32, as on a CPU
    monkeypatch.setenv("LDTM_CACHE_DIR", str(tmp_path / "third"))
    assert amp_dtype(cfg("auto"), CUDA) is None


def test_the_probe_runs_on_a_given_device_and_dtype():
    if not precision.cpu_can_run_bf16():
        pytest.skip("this CPU has no bf16 kernels in oneDNN (AVX2 only)")
    assert precision.measure_speedup(CPU, torch.bfloat16, batch=8, steps=1, rounds=1) > 0
