"""Commands for models: train, gpu slots, export, bench."""

from __future__ import annotations

from . import app  # noqa: F401
