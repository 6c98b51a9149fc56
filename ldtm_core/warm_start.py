"""Where a retrain's starting weights come from: the ticker's active model, when the architecture matches.

A weekly retrain sees last week's history plus a few sessions, so fine-tuning the model that is
serving now reaches its best validation loss in fewer epochs than training from a seeded start
(measured in docs/performance.md). Anything else — no active model, another architecture, an
unreadable checkpoint — trains cold; a warm start is an optimisation, never a reason to fail.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .checkpoints import load_checkpoint
from .errors import LDTMError
from .model import ModelConfig
from .registry import active_model

# Retrains fine-tune the active model by default: chosen from the warm-vs-cold measurement.
DEFAULT_WARM_START = True


@dataclass(frozen=True)
class WarmStart:
    state: dict[str, torch.Tensor]
    model_id: int
    reason: str


def active_weights(engine, ticker: str, cfg: ModelConfig) -> WarmStart | None:
    """The active model's weights for `ticker` if its architecture is `cfg`'s, else None (train cold)."""
    rec = active_model(engine, ticker)
    if rec is None or rec.arch_signature != cfg.signature:
        return None
    try:
        ck = load_checkpoint(rec.promoted_path or rec.checkpoint_path, rec.checkpoint_sha256, ticker=ticker)
    except LDTMError:
        return None  # the registry audit reports a broken file; the retrain just starts cold
    return WarmStart(ck.model.state_dict(), rec.id, f"warm start from active model {rec.id}")
