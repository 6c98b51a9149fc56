"""Checkpoints deleted, truncated or replaced behind the registry's back: a clear error naming the ticker
and the file; every other ticker carries on (predict, export, gate)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
import torch
from rel_helpers import (
    RUN_DATE,
    add_candidate,
    add_passing_backtest,
    build_world,
    cli_env,
    run_cli,
    table_counts,
)

from ldtm_core.db import get_engine
from ldtm_core.learning import registry
from ldtm_core.learning.checkpoints import save_checkpoint
from ldtm_core.learning.model import LDTM, get_profile

pytestmark = pytest.mark.timeout(180)


def _tamper(settings, engine) -> dict[str, str]:
    """AAPL deleted, NVDA truncated, TSLA replaced by another valid TSLA checkpoint; QQQ untouched."""
    models = {m.ticker: m for m in registry.list_models(engine) if m.status == "active"}
    for path in (models["AAPL"].promoted_path, models["AAPL"].checkpoint_path):
        Path(path).unlink()
    for path in (models["NVDA"].promoted_path, models["NVDA"].checkpoint_path):
        data = Path(path).read_bytes()
        Path(path).write_bytes(data[: len(data) // 2])
    cfg = get_profile("demo")
    torch.manual_seed(4242)
    for path in (models["TSLA"].promoted_path, models["TSLA"].checkpoint_path):
        save_checkpoint(Path(path), LDTM(cfg).eval(), cfg, "TSLA", dt.date(2023, 12, 29), 0.1)
    return {t: m.promoted_path for t, m in models.items()}


@pytest.mark.slow
def test_tampered_checkpoints_are_named_and_others_carry_on(pg_url, tmp_path):
    home = tmp_path / "home"
    settings = build_world(pg_url, home)
    engine = get_engine(pg_url)
    paths = _tamper(settings, engine)
    env = cli_env(home, pg_url)

    r = run_cli(["predict", "--run-date", RUN_DATE.isoformat()], env)
    assert r.returncode == 1, r.stderr  # partial run: QQQ predicted, three models failed
    assert "1 rows written" in r.stdout
    err = " ".join(r.stderr.split())  # rich may wrap long paths
    assert "partial: 3 ticker(s) not served because their model failed (AAPL, NVDA, TSLA)" in err
    for ticker, what in (("AAPL", "missing"), ("NVDA", "does not match"), ("TSLA", "does not match")):
        line = next(ln for ln in err.split("skipped ") if ln.startswith(ticker))
        assert what in line and ticker in line and Path(paths[ticker]).name in line, line
    assert "Traceback" not in r.stderr

    # export: the tampered ticker fails naming ticker and file, the healthy one exports.
    before = table_counts(pg_url)
    bad = run_cli(["export", "onnx", "--ticker", "NVDA"], env)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    msg = " ".join(bad.stderr.split())
    assert "NVDA" in msg and "does not match the registry" in msg and ".pt" in msg
    good = run_cli(["export", "onnx", "--ticker", "QQQ"], env)
    assert good.returncode == 0, good.stderr
    assert list((home / "exports").glob("*.onnx"))
    assert table_counts(pg_url) == before


@pytest.mark.slow
def test_gate_refuses_a_tampered_candidate_and_promotes_a_healthy_one(pg_url, tmp_path):
    home = tmp_path / "home"
    settings = build_world(pg_url, home, tickers=["AAPL", "QQQ"])
    engine = get_engine(pg_url)
    bad = add_candidate(pg_url, settings, "AAPL", seed=5)
    good = add_candidate(pg_url, settings, "QQQ", seed=6)
    for mid, t in ((bad, "AAPL"), (good, "QQQ")):
        add_passing_backtest(pg_url, mid, t)
    path = Path(registry.get_model(engine, bad).checkpoint_path)
    path.write_bytes(path.read_bytes()[:100])
    old_active = registry.active_model(engine, "AAPL").id
    env = cli_env(home, pg_url)

    # The seed policy: these hand-made folds have no per-row predictions to pair with AAPL's champion.
    r = run_cli(["gate", "--ticker", "AAPL", "--policy", "seed"], env)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    msg = " ".join(r.stderr.split())
    assert "ticker AAPL" in msg and path.name in msg and "refusing to promote" in msg
    assert registry.active_model(engine, "AAPL").id == old_active  # nothing changed
    assert registry.get_model(engine, bad).status == "candidate"

    r = run_cli(["gate", "--ticker", "QQQ", "--policy", "seed"], env)
    assert r.returncode == 0, r.stderr
    assert registry.active_model(engine, "QQQ").id == good
