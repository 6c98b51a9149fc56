"""Fixtures for the Dagster tests (helpers live in ldtm_dagster_helpers.py)."""

from __future__ import annotations

import pytest
import torch
from dagster import instance_for_test
from ldtm_dagster_helpers import FAKE_NVML, FakeNVML, repo_instance_config

from ldtm_core.learning import gpu_slots


@pytest.fixture
def fake_nvml(monkeypatch):
    for var in (gpu_slots.ENV_PER_JOB, gpu_slots.ENV_HEADROOM, gpu_slots.ENV_MAX_SLOTS):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(gpu_slots, "cpu_count", lambda: 2)
    FAKE_NVML["module"] = FakeNVML([], broken=True)
    yield FAKE_NVML
    FAKE_NVML["module"] = FakeNVML([], broken=True)


@pytest.fixture
def dagster_instance():
    """A real SQLite-backed instance configured by the repository's dagster.yaml (pools enforced)."""
    with instance_for_test(overrides=repo_instance_config()) as instance:
        yield instance


@pytest.fixture(autouse=True)
def _one_torch_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
