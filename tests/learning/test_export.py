"""ONNX export: opset 17, dynamic batch, onnxruntime equals PyTorch; and the TensorRT script's refusal."""

from __future__ import annotations

import datetime as dt
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch

from ldtm_core.errors import CheckpointError
from ldtm_core.learning import export as export_mod
from ldtm_core.learning.checkpoints import load_checkpoint, save_checkpoint
from ldtm_core.learning.export import ExportError, export_onnx
from ldtm_core.learning.model import LDTM, get_profile

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(params=["demo", "reference"])
def checkpoint(request, tmp_path):
    cfg = get_profile(request.param, seed=2)
    torch.manual_seed(2)
    model = LDTM(cfg)
    path = tmp_path / "AAPL_model.pt"
    save_checkpoint(path, model, cfg, "AAPL", dt.date(2024, 1, 2), 0.02)
    return path


def test_onnx_matches_pytorch_with_dynamic_batch(checkpoint, tmp_path):
    out = tmp_path / "exports" / "aapl.onnx"
    res = export_onnx(checkpoint, out)
    assert res.path == out and out.is_file() and res.opset == 17
    assert res.max_abs_diff <= 1e-4

    graph = onnx.load(str(out))
    onnx.checker.check_model(graph)
    assert {o.domain: o.version for o in graph.opset_import}.get("") == 17
    batch_dim = graph.graph.input[0].type.tensor_type.shape.dim[0]
    assert batch_dim.dim_param and not batch_dim.dim_value  # symbolic, not fixed

    # Independent check, at batch sizes the exporter never saw.
    ck = load_checkpoint(checkpoint)
    sess = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(9)
    for batch in (3, 129):
        x = rng.random((batch, ck.config.window, ck.config.input_size), dtype=np.float32)
        (got,) = sess.run(None, {sess.get_inputs()[0].name: x})
        with torch.no_grad():
            want = ck.model(torch.from_numpy(x)).numpy()
        assert got.shape == (batch, 3)
        assert np.abs(got - want).max() <= 1e-4


def test_mismatch_raises_and_writes_nothing(checkpoint, tmp_path, monkeypatch):
    monkeypatch.setattr(export_mod, "verify", lambda *a, **k: 0.5)
    out = tmp_path / "bad.onnx"
    with pytest.raises(ExportError, match="differs from PyTorch"):
        export_onnx(checkpoint, out)
    assert list(tmp_path.glob("*.onnx")) == [] and not list(tmp_path.glob(".tmp-*"))


def test_bad_checkpoint_is_refused(tmp_path):
    bad = tmp_path / "junk.pt"
    bad.write_bytes(b"junk")
    with pytest.raises(CheckpointError, match="junk.pt"):
        export_onnx(bad, tmp_path / "x.onnx")
    assert not (tmp_path / "x.onnx").exists()


def test_tensorrt_script_says_clearly_when_tensorrt_is_absent(tmp_path):
    if shutil.which("trtexec") or Path("/usr/src/tensorrt/bin/trtexec").exists():
        pytest.skip("TensorRT is installed here")
    onnx_file = tmp_path / "m.onnx"
    onnx_file.write_bytes(b"placeholder")
    env = {k: v for k, v in os.environ.items() if k != "TRTEXEC"}
    r = subprocess.run(
        ["bash", str(ROOT / "scripts/build_tensorrt.sh"), str(onnx_file)],
        capture_output=True,
        text=True,
        env=env,
    )
    assert r.returncode == 3
    assert "TensorRT is not installed" in r.stderr
    assert list(tmp_path.iterdir()) == [onnx_file]
    missing = subprocess.run(
        ["bash", str(ROOT / "scripts/build_tensorrt.sh"), str(tmp_path / "none.onnx")],
        capture_output=True,
        text=True,
        env=env,
    )
    assert missing.returncode == 2 and "does not exist" in missing.stderr


@pytest.mark.parametrize("kind", ["fifo", "symlink", "directory"])
def test_export_never_replaces_what_is_not_a_regular_file(checkpoint, tmp_path, kind):
    # Issue 38 D2: as root, `--out /dev/full` replaced the device node with a regular file (a FIFO and a
    # symlink likewise). The file written must be a new or an existing regular file.
    out = tmp_path / "target.onnx"
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    if kind == "fifo":
        os.mkfifo(out)
    elif kind == "symlink":
        out.symlink_to(victim)
    else:
        out.mkdir()
    with pytest.raises(ExportError, match=r"target\.onnx.*not a regular file"):
        export_onnx(checkpoint, out)
    assert victim.read_text() == "keep me"
    assert (out.is_symlink(), out.is_fifo(), out.is_dir()) == (
        kind == "symlink",
        kind == "fifo",
        kind == "directory",
    )


def test_export_where_nothing_can_be_written_and_an_unknown_opset_are_clear_errors(checkpoint, tmp_path):
    # Issue 38 D8: `--out /proc/x.onnx` and `--opset 99` ended in tracebacks.
    with pytest.raises(ExportError, match=r"cannot write .*x\.onnx"):
        export_onnx(checkpoint, Path("/proc/x.onnx"))
    with pytest.raises(ExportError, match=r"opset 99 .*supported: \d+-\d+"):
        export_onnx(checkpoint, tmp_path / "m.onnx", opset=99)
    assert not (tmp_path / "m.onnx").exists()
