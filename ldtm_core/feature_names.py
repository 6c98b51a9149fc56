"""The names of the 11 daily features of SPEC §3, in the order of the model's inputs.

In the base (like `horizons.py`) because two layers need them: `schema.py` names the `features` table's
columns after them, and `data/features.py` computes them.
"""

from __future__ import annotations

FEATURE_NAMES: tuple[str, ...] = (
    "open",
    "high",
    "low",
    "close",
    "volume",
    "log_return_1d",
    "log_return_5d",
    "rsi_14",
    "close_sma_5",
    "close_sma_10",
    "close_sma_20",
)
