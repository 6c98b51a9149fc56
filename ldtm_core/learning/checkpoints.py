"""Checkpoints are data, never code (SPEC §5).

A checkpoint holds the state_dict, the full config, the names of the features it was trained on (the
config's; a config stored without them means the reference recipe's), the architecture signature,
trained_on_date, val_loss and metrics. It is written to a temp file in the same directory and renamed
into place (atomic), its sha256 is returned for the registry, and it is loaded only with
`torch.load(..., weights_only=True)` — a file carrying pickled code is refused.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import io
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch

from ldtm_core.errors import CheckpointError, first_line
from ldtm_core.faults import pause_point
from ldtm_core.learning.model import LDTM, ModelConfig

FORMAT = "ldtm-checkpoint/1"
TEMP_PREFIX = ".tmp-"


@dataclass(frozen=True)
class Weights:
    """A checkpoint's tensors by state_dict name and its config: what inference (batched_forward) needs,
    without building the nn.Module."""

    cfg: ModelConfig
    tensors: dict[str, torch.Tensor]


@dataclass
class Checkpoint:
    model: LDTM | Weights  # LDTM in eval mode, on CPU (load_checkpoint); Weights (load_weights)
    config: ModelConfig
    ticker: str
    trained_on_date: dt.date
    val_loss: float | None
    metrics: dict
    signature: str
    path: Path
    sha256: str


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def checkpoint_payload(
    model: torch.nn.Module,
    cfg: ModelConfig,
    ticker: str,
    trained_on_date: dt.date,
    val_loss: float | None,
    metrics: dict | None = None,
) -> dict:
    """Only tensors, strings, numbers, lists and dicts: everything weights_only=True can read."""
    state = {k: v.detach().to("cpu").clone() for k, v in model.state_dict().items()}
    return {
        "format": FORMAT,
        "ticker": ticker,
        "state_dict": state,
        "config": cfg.to_dict(),
        "feature_names": list(cfg.features),
        "architecture": cfg.architecture,
        "signature": cfg.signature,
        "trained_on_date": trained_on_date.isoformat(),
        "val_loss": None if val_loss is None else float(val_loss),
        "metrics": {k: float(v) if isinstance(v, int | float) else v for k, v in (metrics or {}).items()},
    }


def write_atomic(path: Path, data: bytes) -> str:
    """Write bytes to `path` via temp file + fsync + rename; return the sha256 of what was written."""
    path.parent.mkdir(parents=True, exist_ok=True)
    # The writer's pid in the name lets clean_temp_files tell a dead writer's leftovers from live work.
    fd, tmp = tempfile.mkstemp(prefix=f"{TEMP_PREFIX}{os.getpid()}-", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        pause_point("checkpoint.before_rename")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return hashlib.sha256(data).hexdigest()


def save_checkpoint(
    path: Path,
    model: torch.nn.Module,
    cfg: ModelConfig,
    ticker: str,
    trained_on_date: dt.date,
    val_loss: float | None,
    metrics: dict | None = None,
) -> str:
    """Serialise and write atomically; returns the file's sha256."""
    buffer = io.BytesIO()
    torch.save(checkpoint_payload(model, cfg, ticker, trained_on_date, val_loss, metrics), buffer)
    return write_atomic(Path(path), buffer.getvalue())


def _writer_alive(tmp: Path) -> bool:
    pid = tmp.name[len(TEMP_PREFIX) :].split("-", 1)[0]
    if not pid.isdigit():
        return False
    if int(pid) == os.getpid():  # this process may be writing it on another thread
        return True
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def clean_temp_files(directory: Path) -> int:
    """Remove temp files a killed writer left behind, in `directory` and below; they are never loaded
    or registered. A temp file whose writer process is still running (a concurrent run) is kept."""
    removed = 0
    for tmp in Path(directory).rglob(f"{TEMP_PREFIX}*"):
        if tmp.is_file() and not _writer_alive(tmp):
            tmp.unlink(missing_ok=True)
            removed += 1
    return removed


def load_checkpoint(
    path: Path | str, expected_sha256: str | None = None, ticker: str | None = None
) -> Checkpoint:
    """Load and rebuild the model. Any problem raises CheckpointError naming the file."""
    return _load(path, expected_sha256, ticker, module=True)


def load_weights(
    path: Path | str, expected_sha256: str | None = None, ticker: str | None = None
) -> Checkpoint:
    """load_checkpoint with the same checks and errors, its `model` the tensors (Weights) instead of an
    LDTM: building and filling the module was ~40 % of a cold load, which predict does for every ticker
    each evening (1,000 at the scale docs/performance.md measures)."""
    return _load(path, expected_sha256, ticker, module=False)


# {architecture signature: {state_dict name: (shape, dtype)}} of a freshly built LDTM.
_REFERENCE_STATE: dict[str, dict[str, tuple[tuple[int, ...], torch.dtype]]] = {}


def _fits(cfg: ModelConfig, state) -> bool:
    """True when `state` has exactly the names, shapes and dtypes an LDTM(cfg) would load unchanged."""
    ref = _REFERENCE_STATE.get(cfg.signature)
    if ref is None:
        ref = {k: (tuple(v.shape), v.dtype) for k, v in LDTM(cfg).state_dict().items()}
        _REFERENCE_STATE[cfg.signature] = ref
    return (
        isinstance(state, dict)
        and state.keys() == ref.keys()
        and all(isinstance(v, torch.Tensor) and (tuple(v.shape), v.dtype) == ref[k] for k, v in state.items())
    )


def _load(path: Path | str, expected_sha256: str | None, ticker: str | None, module: bool) -> Checkpoint:
    path = Path(path)
    who = f"checkpoint {path}" + (f" (ticker {ticker})" if ticker else "")
    if not path.is_file():
        raise CheckpointError(f"{who} is missing")
    data = path.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    if expected_sha256 is not None and digest != expected_sha256:
        raise CheckpointError(
            f"{who} does not match the registry: sha256 {digest[:12]}… != {expected_sha256[:12]}…"
        )
    try:
        payload = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except Exception as exc:  # truncated zip, foreign pickle, code objects refused by weights_only
        first = first_line(exc) or type(exc).__name__
        raise CheckpointError(f"{who} cannot be read as an LDTM checkpoint: {first}") from None
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise CheckpointError(
            f"{who} is not an LDTM checkpoint (format {payload.get('format') if isinstance(payload, dict) else type(payload).__name__!r})"
        )
    try:
        cfg = ModelConfig.from_dict(payload["config"])
        if tuple(payload["feature_names"]) != cfg.features or cfg.signature != payload["signature"]:
            raise CheckpointError(f"{who} records other features or architecture than its config")
        if ticker is not None and payload["ticker"] != ticker:
            raise CheckpointError(f"{who} belongs to ticker {payload['ticker']}")
        if not module and _fits(cfg, payload["state_dict"]):
            model = Weights(cfg, dict(payload["state_dict"]))
        else:  # anything else goes through load_state_dict: its checks, casts and errors
            model = LDTM(cfg)
            model.load_state_dict(payload["state_dict"])
            model.eval()
            if not module:
                model = Weights(cfg, {k: v.detach() for k, v in model.state_dict().items()})
    except CheckpointError:
        raise
    except Exception as exc:
        raise CheckpointError(f"{who} is inconsistent: {str(exc).splitlines()[0]}") from None
    return Checkpoint(
        model=model,
        config=cfg,
        ticker=payload["ticker"],
        trained_on_date=dt.date.fromisoformat(payload["trained_on_date"]),
        val_loss=payload["val_loss"],
        metrics=payload.get("metrics", {}),
        signature=payload["signature"],
        path=path,
        sha256=digest,
    )
