"""Where a retrain's starting weights come from: the ticker's active model, when the architecture matches.

A weekly retrain sees last week's history plus a few sessions, so fine-tuning the model that is
serving now reaches its best validation loss in fewer epochs than training from a seeded start.
Measured (docs/performance.md, 5 tickers): 1.6x less wall time, best epoch 3.8 vs 11.4 — but the
validation loss was 1.25 % worse on average (worse for 3 of 5 tickers), so retrains start cold by
default and the warm start is one flag away. Anything else — no active model, another architecture,
an unreadable checkpoint — trains cold; a warm start is an optimisation, never a reason to fail.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ldtm_core.errors import LDTMError
from ldtm_core.learning.checkpoints import load_checkpoint
from ldtm_core.learning.model import ModelConfig
from ldtm_core.learning.registry import active_model

# Chosen from the warm-vs-cold measurement: faster, but a worse validation loss, so off by default.
DEFAULT_WARM_START = False


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
