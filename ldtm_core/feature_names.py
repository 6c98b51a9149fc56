"""The reference recipe's daily features (SPEC §3), in the order of its model inputs.

In the base (like `horizons.py`) because two layers need them: `schema.py` stores exactly these as the
`features` table's columns, and `data/features.py` registers how each is computed (its `FEATURES`
registry may hold more; a model records the names it was trained on).
"""

from __future__ import annotations

REFERENCE_FEATURES: tuple[str, ...] = (
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
