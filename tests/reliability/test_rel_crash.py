"""Crash safety: real processes SIGKILLed inside their critical sections, then rerun and compared."""

from __future__ import annotations

import datetime as dt

import pytest
from rel_helpers import (
    RUN_DATE,
    TICKERS,
    VOLATILE,
    build_world,
    cli_env,
    fillback_world,
    pause_env,
    release,
    sigkill,
    snapshot_state,
    spawn_cli,
    spawn_python,
    table_counts,
    wait_paused,
)
from sqlalchemy import func, select

from ldtm_core.accountability.ledger.audit import verify
from ldtm_core.accountability.ledger.fillback import fillback
from ldtm_core.accountability.ledger.snapshots import predict
from ldtm_core.data.ingest import ingest_frame
from ldtm_core.data.synthetic_market import generate
from ldtm_core.db import get_engine
from ldtm_core.learning import registry
from ldtm_core.learning.checkpoints import TEMP_PREFIX, load_checkpoint, sha256_file
from ldtm_core.schema import model_registry, run_log, snapshots

pytestmark = pytest.mark.timeout(240)


def _registry_consistent(url: str) -> list:
    """Every registry row points at an existing file whose sha256 matches and that loads."""
    models = registry.list_models(get_engine(url))
    for m in models:
        ckpt = load_checkpoint(m.checkpoint_path, expected_sha256=m.checkpoint_sha256, ticker=m.ticker)
        assert ckpt.sha256 == m.checkpoint_sha256
        if m.promoted_path:
            assert sha256_file(m.promoted_path) == m.checkpoint_sha256, m
    return models


# --- training -------------------------------------------------------------------------------------


@pytest.mark.parametrize("point", ["checkpoint.before_rename#2", "train.before_register#2"])
def test_training_killed_mid_run_rerun_finishes_and_registry_only_holds_whole_files(
    pg_url, tmp_path, pause_dir, point
):
    url, home = pg_url, tmp_path / "home"
    tickers = ["AAPL", "NVDA", "TSLA"]
    ingest_frame(get_engine(url), generate(tickers, "2022-01-03", "2024-06-28", seed=3), "synthetic")
    args = ["train", "-t", ",".join(tickers), "-p", "demo", "--workers", "1", "--set", "max_epochs=2"]
    proc = spawn_cli(args, cli_env(home, url, **pause_env(pause_dir, point)))
    wait_paused(pause_dir, [proc])
    sigkill(proc)

    # Killed while writing/registering the 2nd ticker: only the 1st is registered.
    killed = _registry_consistent(url)
    assert [m.ticker for m in killed] == ["AAPL"]
    temps = list((home / "checkpoints").rglob(f"{TEMP_PREFIX}*"))
    if point.startswith("checkpoint"):
        assert len(temps) == 1 and temps[0].parent.name == "NVDA"  # the half-written file

    proc = spawn_cli(args, cli_env(home, url))
    out, err = proc.communicate(timeout=200)
    assert proc.returncode == 0, out + err
    models = _registry_consistent(url)
    assert sorted(m.ticker for m in models) == ["AAPL", "AAPL", "NVDA", "TSLA"]
    assert all(m.status == "candidate" for m in models)
    # The dead writer's temp file was cleaned at the start of the rerun and nothing new was left.
    assert list((home / "checkpoints").rglob(f"{TEMP_PREFIX}*")) == []
    registered = {m.checkpoint_path for m in models}
    assert not any(TEMP_PREFIX in p for p in registered)


# --- predict --------------------------------------------------------------------------------------


@pytest.mark.parametrize("point,rows_after_kill", [("predict.before_commit", 0), ("predict.after_commit", 4)])
def test_predict_killed_leaves_all_or_none_and_rerun_equals_clean_run(
    db_url, tmp_path, pause_dir, twin_url, point, rows_after_kill
):
    home = tmp_path / "home"
    settings = build_world(db_url, home)
    proc = spawn_cli(
        ["predict", "--run-date", RUN_DATE.isoformat()], cli_env(home, db_url, **pause_env(pause_dir, point))
    )
    wait_paused(pause_dir, [proc])
    sigkill(proc)

    engine = get_engine(db_url)
    with engine.connect() as conn:
        n = conn.execute(select(func.count()).select_from(snapshots)).scalar_one()
        runs = conn.execute(select(run_log.c.kind, run_log.c.status)).all()
    assert n == rows_after_kill  # the transaction is atomic: 0 or all 4, never some
    assert runs == [("predict", "running")]  # the killed run left a trace, not a success

    res = predict(engine, settings, RUN_DATE)
    assert res.rows_written == len(TICKERS) - rows_after_kill
    assert res.rows_existing == rows_after_kill
    assert not res.skipped
    assert verify(engine).ok

    twin = build_world(twin_url, tmp_path / "twin")
    predict(get_engine(twin_url), twin, RUN_DATE)
    state = snapshot_state(db_url)
    assert len(state) == len(TICKERS)
    assert state == snapshot_state(twin_url)  # values, versions and hash chain of a clean run


# --- fillback -------------------------------------------------------------------------------------


def test_fillback_killed_rerun_fills_the_rest_once_with_clean_run_values(
    db_url, tmp_path, pause_dir, twin_url
):
    home = tmp_path / "home"
    _, first = fillback_world(db_url, home)
    assert first.total_filled > 0
    filled_before = {r[0:3]: r for r in snapshot_state(db_url)}

    proc = spawn_cli(["fillback"], cli_env(home, db_url, **pause_env(pause_dir, "fillback.before_commit")))
    wait_paused(pause_dir, [proc])
    sigkill(proc)
    assert {r[0:3]: r for r in snapshot_state(db_url)} == filled_before  # rolled back: nothing changed

    engine = get_engine(db_url)
    second = fillback(engine, neutral_band_pct=0.25)
    assert second.total_filled > 0
    assert fillback(engine, neutral_band_pct=0.25).total_filled == 0  # nothing is filled twice

    fillback_world(twin_url, tmp_path / "twin")
    fillback(get_engine(twin_url), neutral_band_pct=0.25)
    after = snapshot_state(db_url)
    assert after == snapshot_state(twin_url)
    # Every actual filled by the first run is still exactly what it was.
    cols = [c.name for c in snapshots.c if c.name not in VOLATILE]
    actual_idx = [i for i, c in enumerate(cols) if c.endswith("_actual")]
    for row in after:
        old = filled_before[row[0:3]]
        for i in actual_idx:
            if old[i] is not None:
                assert row[i] == old[i]
    assert all(row[cols.index("one_month_actual")] is not None for row in after)
    assert verify(engine).ok


# --- promotion ------------------------------------------------------------------------------------

PROMOTE = (
    "from ldtm_core.config import Settings\n"
    "from ldtm_core.db import get_engine\n"
    "from ldtm_core.learning.registry import promote\n"
    "s = Settings.from_env()\n"
    "promote(get_engine(s.database_url), {mid}, 'crash test', s)\n"
)


def _active(url: str, ticker: str) -> list[int]:
    with get_engine(url).connect() as conn:
        return list(
            conn.execute(
                select(model_registry.c.id).where(
                    model_registry.c.ticker == ticker, model_registry.c.status == "active"
                )
            ).scalars()
        )


@pytest.mark.parametrize("point", ["promote.after_copy", "promote.after_retire"])
def test_promotion_killed_keeps_exactly_one_active_and_files_agree(db_url, tmp_path, pause_dir, point):
    home = tmp_path / "home"
    settings = build_world(db_url, home, tickers=["AAPL"])
    old = _active(db_url, "AAPL")
    assert len(old) == 1
    import torch

    from ldtm_core.learning.checkpoints import save_checkpoint
    from ldtm_core.learning.model import LDTM, get_profile

    cfg = get_profile("demo")
    torch.manual_seed(999)
    path = settings.checkpoint_dir / "candidates" / "AAPL" / "new.pt"
    sha = save_checkpoint(path, LDTM(cfg).eval(), cfg, "AAPL", dt.date(2024, 3, 1), 0.05)
    engine = get_engine(db_url)
    new = registry.register_candidate(
        engine,
        ticker="AAPL",
        cfg=cfg,
        profile="demo",
        trained_on_date=dt.date(2024, 3, 1),
        checkpoint_path=str(path),
        checkpoint_sha256=sha,
        val_loss=0.05,
    )
    counts = table_counts(db_url)

    proc = spawn_python(PROMOTE.format(mid=new), cli_env(home, db_url, **pause_env(pause_dir, point)))
    wait_paused(pause_dir, [proc])
    # While the promoter sits inside its transaction, readers still see exactly the old active model.
    assert _active(db_url, "AAPL") == old
    sigkill(proc)

    assert _active(db_url, "AAPL") == old
    assert registry.get_model(engine, new).status == "candidate"
    assert table_counts(db_url) == counts  # no event, no half-applied transition
    _registry_consistent(db_url)

    res = registry.promote(engine, new, "rerun", settings)
    assert res.changed and res.retired_model_id == old[0]
    assert _active(db_url, "AAPL") == [new]
    assert registry.get_model(engine, old[0]).status == "retired"
    models = _registry_consistent(db_url)
    active = [m for m in models if m.status == "active"]
    assert len(active) == 1 and sha256_file(active[0].promoted_path) == sha


def test_release_hook_is_inert_without_the_variable(monkeypatch, tmp_path):
    """The test-only pause point does nothing (and never blocks) when LDTM_TEST_PAUSE_AT is unset."""
    from ldtm_core.faults import pause_point

    monkeypatch.delenv("LDTM_TEST_PAUSE_AT", raising=False)
    monkeypatch.setenv("LDTM_TEST_PAUSE_DIR", str(tmp_path))
    pause_point("predict.before_commit")
    monkeypatch.setenv("LDTM_TEST_PAUSE_AT", "other.point")
    pause_point("predict.before_commit")
    assert list(tmp_path.iterdir()) == []
    release(tmp_path)  # with the release file present, a matching point returns at once
    monkeypatch.setenv("LDTM_TEST_PAUSE_AT", "predict.before_commit")
    pause_point("predict.before_commit")
    assert (tmp_path / f"paused-{__import__('os').getpid()}").exists()
