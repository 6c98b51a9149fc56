"""Fixtures the receipts' tests share."""

from __future__ import annotations

import pytest

from ldtm_core.accountability.ledger import receipts as rc


@pytest.fixture
def keys(tmp_path):
    """A fresh Ed25519 receipt key pair: (private PEM, public PEM)."""
    private, public = tmp_path / "keys" / "receipts.pem", tmp_path / "keys" / "receipts.pub"
    rc.keygen(private, public)
    return private, public
