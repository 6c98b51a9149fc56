"""Inference for many tickers at once: the batched forward and the verified model cache.

`batched_forward` runs M same-architecture models in one pass; `load_verified_model` loads a
checkpoint once per process and re-checks the file against the registry on every use.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import torch

from ldtm_core.errors import CheckpointError
from ldtm_core.learning.cells import recurrence
from ldtm_core.learning.checkpoints import Weights, load_weights, sha256_file
from ldtm_core.learning.model import LDTM
from ldtm_core.learning.registry import ModelRecord


def _tensors(model: LDTM | Weights) -> Mapping[str, torch.Tensor]:
    return model.tensors if isinstance(model, Weights) else dict(model.named_parameters())


# LDTM's recurrent module (model.LDTM.lstm, of the config's `cell` kind): its state_dict prefix.
RECURRENT = "lstm."


@torch.no_grad()
def batched_forward(models: Sequence[LDTM | Weights], x: torch.Tensor) -> torch.Tensor:
    """Run M same-architecture models, model i on x[i] ([M, W, F] -> [M, horizons]), in one pass.

    The weights are stacked and the recurrence runs as batched matrix products (`cells`), so 103 tickers
    cost one pass of W steps instead of 103 module calls. Eval-mode semantics (no dropout); exact up to
    float rounding, checked against the modules in the tests. Runs where x is (a CPU or a card).
    """
    if len(models) == 0:
        return torch.empty(0, 0)
    cfg = models[0].cfg
    params = [{k: v.to(x.device) for k, v in _tensors(md).items()} for md in models]
    h = recurrence(cfg.cell, params, x.to(torch.float32), cfg.num_layers, prefix=RECURRENT)
    return _heads(params, h[:, -1, :], len(cfg.horizons))


def _heads(params: Sequence[Mapping[str, torch.Tensor]], last: torch.Tensor, horizons: int) -> torch.Tensor:
    """Each model's horizon heads (model.Head) on its last hidden state: [M, H] -> [M, horizons]."""
    preds = []
    for k in range(horizons):
        l1, l2 = f"heads.{k}.net.0", f"heads.{k}.net.3"  # the Linear layers around ReLU and Dropout
        w1 = torch.stack([p[f"{l1}.weight"] for p in params])
        z = torch.bmm(last[:, None, :], w1.transpose(1, 2))[:, 0, :]
        z = torch.relu(z + torch.stack([p[f"{l1}.bias"] for p in params]))
        w2 = torch.stack([p[f"{l2}.weight"] for p in params])
        out = torch.bmm(z[:, None, :], w2.transpose(1, 2))[:, 0, :]
        preds.append(out + torch.stack([p[f"{l2}.bias"] for p in params]))
    return torch.cat(preds, dim=1)


# Verified models kept across runs in one process (a Dagster code server, a benchmark): (path, sha256)
# -> weights (checkpoints.load_weights: inference needs no nn.Module). The file on disk is re-hashed
# against the registry on every run, so a replaced or corrupted checkpoint is still refused; only the
# unpickling is saved.
_MODEL_CACHE: dict[tuple[str, str], Weights] = {}
_MODEL_CACHE_MAX = 2048


def clear_model_cache() -> None:
    _MODEL_CACHE.clear()


def load_verified_model(rec: ModelRecord, ticker: str) -> Weights:
    key = (rec.load_path, rec.checkpoint_sha256)
    model = _MODEL_CACHE.get(key)
    if model is not None:
        path = Path(rec.load_path)
        if not path.is_file():
            raise CheckpointError(f"checkpoint {path} (ticker {ticker}) is missing")
        digest = sha256_file(path)
        if digest != rec.checkpoint_sha256:
            raise CheckpointError(
                f"checkpoint {path} (ticker {ticker}) does not match the registry: "
                f"sha256 {digest[:12]}… != {rec.checkpoint_sha256[:12]}…"
            )
        return model
    ckpt = load_weights(rec.load_path, expected_sha256=rec.checkpoint_sha256, ticker=ticker)
    if ckpt.signature != rec.arch_signature:
        raise CheckpointError(
            f"checkpoint {rec.load_path} ({ticker}) has another architecture than its registry row"
        )
    if len(_MODEL_CACHE) >= _MODEL_CACHE_MAX:
        _MODEL_CACHE.clear()
    _MODEL_CACHE[key] = ckpt.model
    return ckpt.model
