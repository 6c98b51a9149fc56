"""ONNX export (SPEC §11): opset 17, dynamic batch axis, checked, and verified against PyTorch.

The file is only written once onnx.checker and onnxruntime agree with PyTorch within 1e-4 on
random windows at several batch sizes; it is written atomically (temp file + rename). Its metadata
(`ldtm.features`) names the model's features in the order of the input's last axis.
"""

from __future__ import annotations

import io
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ldtm_core.errors import LDTMError
from ldtm_core.learning.checkpoints import Checkpoint, load_checkpoint, write_atomic

TOLERANCE = 1e-4
CHECK_BATCH_SIZES = (1, 7, 64)
INPUT_NAME, OUTPUT_NAME = "x", "y"
FEATURES_KEY = "ldtm.features"  # metadata: the input's columns, comma-separated


class ExportError(LDTMError):
    """The exported graph is invalid or does not reproduce the PyTorch model."""


@dataclass
class ExportResult:
    path: Path
    max_abs_diff: float
    opset: int
    sha256: str = ""
    features: tuple[str, ...] = ()


def to_onnx_bytes(model: torch.nn.Module, window: int, n_features: int, opset: int = 17) -> bytes:
    model = model.eval()
    dummy = torch.rand(2, window, n_features)
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        # The legacy exporter warns that batch_first LSTMs with a dynamic batch are exported
        # with a batch-size-independent graph; the comparison below is what proves it right.
        warnings.simplefilter("ignore")
        torch.onnx.export(
            model,
            (dummy,),
            buffer,
            input_names=[INPUT_NAME],
            output_names=[OUTPUT_NAME],
            dynamic_axes={INPUT_NAME: {0: "batch"}, OUTPUT_NAME: {0: "batch"}},
            opset_version=opset,
            dynamo=False,
        )
    return buffer.getvalue()


def with_features(onnx_bytes: bytes, features: tuple[str, ...]) -> bytes:
    """The graph with the names of its input columns in its metadata (FEATURES_KEY)."""
    import onnx

    graph = onnx.load_from_string(onnx_bytes)
    onnx.helper.set_model_props(graph, {FEATURES_KEY: ",".join(features)})
    return graph.SerializeToString()


def verify(
    onnx_bytes: bytes,
    model: torch.nn.Module,
    window: int,
    n_features: int,
    seed: int = 0,
    providers: tuple[str, ...] = ("CPUExecutionProvider",),
) -> float:
    """onnx.checker + onnxruntime (on `providers`, e.g. CUDAExecutionProvider) vs PyTorch on random
    windows; returns the max abs difference."""
    import onnx
    import onnxruntime as ort

    try:
        onnx.checker.check_model(onnx.load_from_string(onnx_bytes))
    except Exception as exc:  # noqa: BLE001
        raise ExportError(f"onnx.checker rejected the exported graph: {exc}") from None
    missing = [p for p in providers if p not in ort.get_available_providers()]
    if missing:
        raise ExportError(
            f"onnxruntime {ort.__version__} has no {', '.join(missing)} here "
            f"(available: {', '.join(ort.get_available_providers())})"
        )
    session = ort.InferenceSession(onnx_bytes, providers=list(providers))
    rng = np.random.default_rng(seed)
    worst = 0.0
    for batch in CHECK_BATCH_SIZES:
        x = rng.random((batch, window, n_features), dtype=np.float32)  # windows are min-max normalised
        (got,) = session.run([OUTPUT_NAME], {INPUT_NAME: x})
        with torch.no_grad():
            want = model(torch.from_numpy(x)).numpy()
        if got.shape != want.shape:
            raise ExportError(f"ONNX output shape {got.shape} != PyTorch {want.shape} at batch {batch}")
        worst = max(worst, float(np.abs(got - want).max()))
    return worst


def opset_range() -> tuple[int, int]:
    """The opsets torch's TorchScript exporter (the one used here, dynamo=False) writes."""
    try:
        from torch.onnx import _constants as c

        return c.ONNX_MIN_OPSET, getattr(c, "ONNX_TORCHSCRIPT_EXPORTER_MAX_OPSET", c.ONNX_MAX_OPSET)
    except (ImportError, AttributeError):  # a torch without the private table: the known-good range
        return 9, 17


def check_target(out: Path) -> None:
    """Refuse to write over anything but a regular file: a device node, FIFO, symlink or folder at
    `out` is not ours to replace (as root, `--out /dev/full` used to become a regular file)."""
    if out.is_symlink() or (out.exists() and not out.is_file()):
        kind = "a symlink" if out.is_symlink() else "a folder" if out.is_dir() else "a device, FIFO or socket"
        raise ExportError(f"{out} exists and is not a regular file ({kind}); nothing written")


def export_onnx(
    checkpoint_or_path: Checkpoint | str | Path, out_path: str | Path, opset: int = 17
) -> ExportResult:
    low, high = opset_range()
    if not low <= opset <= high:
        raise ExportError(
            f"opset {opset} cannot be written by torch {torch.__version__} (supported: {low}-{high})"
        )
    out = Path(out_path)
    check_target(out)
    ckpt = (
        checkpoint_or_path
        if isinstance(checkpoint_or_path, Checkpoint)
        else load_checkpoint(checkpoint_or_path)
    )
    model, cfg = ckpt.model.eval(), ckpt.config
    data = with_features(to_onnx_bytes(model, cfg.window, cfg.input_size, opset), cfg.features)
    diff = verify(data, model, cfg.window, cfg.input_size)
    if not diff <= TOLERANCE:
        raise ExportError(
            f"ONNX export of {ckpt.path} differs from PyTorch by {diff:.3g} (> {TOLERANCE}); nothing written"
        )
    check_target(out)  # again: the export took seconds
    try:
        sha = write_atomic(out, data)
    except OSError as exc:
        raise ExportError(f"cannot write {out}: {exc.strerror or exc}; nothing written") from None
    return ExportResult(path=out, max_abs_diff=diff, opset=opset, sha256=sha, features=cfg.features)
