"""Fixtures for the Dagster tests (helpers live in ldtm_dagster_helpers.py)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import torch
from dagster import instance_for_test
from ldtm_dagster_helpers import FAKE_NVML, TICKERS, FakeNVML, repo_instance_config, tiny_resources

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


@pytest.fixture
def backtest_world(tmp_path, sqlite_url, monkeypatch):
    """Prices and a candidate per ticker, so the real `backtests` asset writes real fold rows; the
    optimiser is stubbed (a constant model) to keep each materialization about a second."""
    from accountability_helpers import ingest, make_model, make_settings

    from ldtm_core.db import get_engine
    from ldtm_core.learning import training_loop

    class LastStep(torch.nn.Module):  # any module mapping [B, W, F] -> [B, 3] will do
        def __init__(self, features: int):
            super().__init__()
            self.linear = torch.nn.Linear(features, 3)

        def forward(self, x):
            return self.linear(x[:, -1, :])

    def constant_fit(train, val, cfg, device=None, threads=None, init_state=None):
        # A module, not a bare function: warm-chained folds hand its state_dict to the next fold.
        return training_loop.FitResult(
            model=LastStep(cfg.input_size),
            val_loss=0.0,
            epochs=1,
            best_epoch=1,
            duration_s=0,
            device="cpu",
            samples_per_s=0,
        )

    monkeypatch.setattr(training_loop, "fit", constant_fit)  # what the backtest folds call
    engine = get_engine(sqlite_url)
    settings = make_settings(tmp_path, sqlite_url)
    tickers = TICKERS.split(",")
    ingest(engine, tickers, start="2022-01-03", end="2024-06-28")
    for i, t in enumerate(tickers):
        make_model(engine, settings, t, seed=i)
    return tiny_resources(tmp_path / "home", sqlite_url), engine


@pytest.fixture
def webhook(monkeypatch):
    received = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            received.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_address[1]}/hook/s3cr3t-token"
    monkeypatch.setenv("LDTM_NOTIFY_WEBHOOK_URL", url)
    yield received
    server.shutdown()
