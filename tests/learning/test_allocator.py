"""The training process's malloc settings (learning/allocator.py): applied once on a CPU fit, off by
LDTM_TRAINING_MALLOC=0, a no-op without glibc, and without effect on what training computes."""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

from ldtm_core.errors import ConfigError
from ldtm_core.learning import allocator, training_loop


@pytest.fixture(autouse=True)
def _fresh_cache():
    allocator.keep_freed_buffers.cache_clear()
    yield
    allocator.keep_freed_buffers.cache_clear()


def test_applied_where_glibc_is_and_only_when_the_flag_is_on(monkeypatch):
    calls = []

    def mallopt(param, value):
        calls.append((param, value))
        return 1

    class FakeLibc:
        pass

    libc = FakeLibc()
    libc.mallopt = mallopt  # a plain function, as ctypes gives: argtypes can be set on it
    monkeypatch.setattr(ctypes, "CDLL", lambda name: libc)
    monkeypatch.setenv("LDTM_TRAINING_MALLOC", "0")
    assert allocator.keep_freed_buffers() is False and calls == []
    allocator.keep_freed_buffers.cache_clear()
    monkeypatch.setenv("LDTM_TRAINING_MALLOC", "on")
    assert allocator.keep_freed_buffers() is True
    assert calls == [
        (allocator.M_MMAP_THRESHOLD, allocator.MMAP_THRESHOLD),
        (allocator.M_TRIM_THRESHOLD, allocator.TRIM_THRESHOLD),
    ]
    assert allocator.keep_freed_buffers() is True and len(calls) == 2  # once per process


def test_no_glibc_is_not_an_error(monkeypatch):
    def missing(name):
        raise OSError(f"{name}: cannot open shared object file")

    monkeypatch.setattr(ctypes, "CDLL", missing)
    assert allocator.keep_freed_buffers() is False


def test_a_bad_flag_is_refused_by_name(monkeypatch):
    monkeypatch.setenv("LDTM_TRAINING_MALLOC", "maybe")
    with pytest.raises(ConfigError, match="LDTM_TRAINING_MALLOC"):
        allocator.keep_freed_buffers()


def test_a_cpu_fit_sets_it_up(monkeypatch):
    seen = []
    monkeypatch.setattr(training_loop, "keep_freed_buffers", lambda: seen.append(True))
    training_loop.setup_device(torch.device("cpu"), 1)
    assert seen == [True]


def test_training_computes_the_same_with_and_without_it():
    # Process-wide, so each setting gets its own interpreter; the fit is bitwise the same.
    script = textwrap.dedent(
        """
        import json, numpy as np, torch
        from ldtm_core.data.samples import SampleSet
        from ldtm_core.learning import allocator, training_loop
        from ldtm_core.learning.model import get_profile
        rng = np.random.default_rng(0)
        def sset(n):
            d = np.datetime64("2000-01-01") + np.arange(n).astype("timedelta64[D]")
            return SampleSet(
                x=rng.normal(size=(n, 20, 11)).astype(np.float32), y=rng.normal(size=(n, 3)).astype(np.float32),
                close_min=np.zeros(n), close_max=np.ones(n), close=np.ones(n), prev_close=np.ones(n),
                dates=d, target_dates=np.stack([d] * 3, 1), target_close=np.ones((n, 3)),
            )
        train, val = sset(300), sset(60)
        cfg = get_profile("reference", hidden_size=16, head_hidden=8, window=20, max_epochs=3, amp="off")
        r = training_loop.fit(train, val, cfg, threads=1)
        print(json.dumps({"applied": allocator.keep_freed_buffers(), "loss": r.val_loss,
                          "history": r.history}))
        """
    )
    out = {}
    for flag in ("0", "1"):
        run = subprocess.run(
            [sys.executable, "-c", script],
            capture_output=True,
            text=True,
            env={**os.environ, "LDTM_TRAINING_MALLOC": flag},
            check=True,
        )
        out[flag] = json.loads(run.stdout.strip().splitlines()[-1])
    assert out["0"]["applied"] is False and out["1"]["applied"] is (sys.platform == "linux")
    assert out["0"]["loss"] == out["1"]["loss"] and out["0"]["history"] == out["1"]["history"]
