"""Fixtures for the reliability tests (helpers live in rel_helpers.py)."""

from __future__ import annotations

import pytest
from rel_helpers import pg_ensure_up

from ldtm_core.learning.inference import clear_model_cache


@pytest.fixture
def pause_dir(tmp_path):
    d = tmp_path / "pause"
    d.mkdir()
    return d


@pytest.fixture
def twin_url(tmp_path):
    """A second, independent SQLite database for the 'clean run' a crashed run is compared with."""
    return f"sqlite:///{tmp_path / 'twin.db'}"


@pytest.fixture(autouse=True)
def _fresh_model_cache():
    clear_model_cache()
    yield
    clear_model_cache()


@pytest.fixture
def pg_guard():
    """Whatever happens in the test, PostgreSQL is up and accepting connections afterwards."""
    yield
    pg_ensure_up()
