"""Commands for the accountability loop: predict, fillback, leaderboard, audit, backtest, registry, gate."""

from __future__ import annotations

from . import app  # noqa: F401
