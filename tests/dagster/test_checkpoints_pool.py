"""The `checkpoints` and `backtests` graph assets hold one `gpu` slot per training process, follow the
slot plan from their first run; a killed retrain resumes and leaves no orphan training process behind."""

import datetime as dt
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from dagster import (
    AssetCheckKey,
    AssetKey,
    DagsterInstance,
    ReexecutionOptions,
    execute_job,
    instance_for_test,
)
from dagster._core.definitions.reconstruct import ReconstructableJob
from dagster._core.storage.asset_check_execution_record import AssetCheckExecutionRecordStatus
from ldtm_dagster_helpers import REPO, process_tree, repo_instance_config, step_processes, wait_dead
from sqlalchemy import func, select

from ldtm_core.config import Settings
from ldtm_core.data.ingest import ingest_synthetic
from ldtm_core.db import get_engine
from ldtm_core.learning.model import get_profile
from ldtm_core.learning.training import train_ticker
from ldtm_core.schema import backtest_folds, model_registry
from ldtm_dagster.gpu_pool import GPU_POOL

JOB_FILE = str(Path(__file__).with_name("pool_jobs.py"))
TICKERS = ["AAPL", "NVDA", "TSLA", "QQQ"]  # demo universe order: run A takes the first two, run B the rest


@pytest.fixture
def world(pg_url, tmp_path, monkeypatch):
    """Prices for four tickers on PostgreSQL (the production database: the kill and resume tests need
    its transactions), LDTM_* resources for the step processes, a Dagster instance on disk."""
    # From 2021: three quarter-anchored backtest folds need history before the first cutoff (2023-06-30).
    ingest_synthetic(get_engine(pg_url), TICKERS, "2021-01-04", "2024-06-28", seed=0)
    env = {
        "LDTM_HOME": str(tmp_path / "ldtm"),
        "LDTM_DATABASE_URL": pg_url,
        "LDTM_PROFILE": "demo",
        "LDTM_MAX_EPOCHS": "1",
        "LDTM_GPU_MAX_SLOTS": "2",
    }
    monkeypatch.setenv("LDTM_UNIVERSE", "demo")  # the partitions the test process already loaded
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(REPO / "dagster.yaml", home / "dagster.yaml")
    with instance_for_test(temp_dir=str(home), overrides=repo_instance_config()) as instance:
        yield instance, get_engine(pg_url), home


def _max_overlap(spans) -> int:
    events = sorted(
        [(s, 1) for _, s, _ in spans] + [(e, -1) for _, _, e in spans], key=lambda x: (x[0], x[1])
    )
    live = peak = 0
    for _, d in events:
        live += d
        peak = max(peak, live)
    return peak


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_two_retrains_on_a_limit_of_two_never_train_more_than_two_at_once(world):
    """Training and the backtests' fold trainings both fan out one pool step per chunk: two retrain runs
    (checkpoints -> backtests) started together never have more than 2 training processes at once."""
    instance, engine, home = world
    assert instance.event_log_storage.get_concurrency_info(GPU_POOL).slot_count in (0, 1)  # before any run
    # Two run workers started together, as two launched runs would be.
    env = {**os.environ, "DAGSTER_HOME": str(home)}
    workers = [
        subprocess.Popen([sys.executable, JOB_FILE, first, last, "retrain"], env=env, cwd=REPO)
        for first, last in (("AAPL", "NVDA"), ("TSLA", "QQQ"))
    ]
    assert [w.wait(timeout=540) for w in workers] == [0, 0]
    # The first run set the pool to the slot plan (2), with no sensor tick and no daemon.
    info = instance.event_log_storage.get_concurrency_info(GPU_POOL)
    assert info.slot_count == 2 and info.active_slot_count == 0
    spans = {}
    for asset, key in (("checkpoints", "train_spans"), ("backtests", "backtest_spans")):
        records = instance.fetch_materializations(AssetKey(asset), limit=20).records
        by_run = {r.run_id: r.asset_materialization.metadata[key].value for r in records}
        assert len(by_run) == 2, asset
        spans[asset] = [s for run_spans in by_run.values() for s in run_spans]
        assert len(spans[asset]) == 4 and len({pid for pid, _, _ in spans[asset]}) == 4  # a process per chunk
    assert _max_overlap(spans["checkpoints"] + spans["backtests"]) <= 2, spans
    with engine.connect() as conn:
        models = dict(conn.execute(select(model_registry.c.ticker, model_registry.c.id)).all())
        backtested = conn.execute(select(backtest_folds.c.ticker, backtest_folds.c.model_id).distinct()).all()
    assert sorted(models) == sorted(TICKERS)
    assert sorted(backtested) == sorted(models.items())  # each ticker's new candidate, backtested
    checks = instance.event_log_storage.get_asset_check_execution_history(
        AssetCheckKey(AssetKey("backtests"), "no_leakage"), limit=5
    )
    assert len(checks) == 2 and all(c.status == AssetCheckExecutionRecordStatus.SUCCEEDED for c in checks)


def _start_paused_run(home, tmp_path, first, last):
    pause = tmp_path / "pause"
    pause.mkdir()
    env = {
        **os.environ,
        "DAGSTER_HOME": str(home),
        "LDTM_TEST_PAUSE_AT": "train.before_register",
        "LDTM_TEST_PAUSE_DIR": str(pause),
        "LDTM_TEST_PAUSE_S": "120",
    }
    worker = subprocess.Popen([sys.executable, JOB_FILE, first, last], env=env, cwd=REPO)
    deadline = time.monotonic() + 180
    while not list(pause.glob("paused-*")):
        assert worker.poll() is None, "the run ended before training reached the pause point"
        assert time.monotonic() < deadline, "no training step reached the pause point"
        time.sleep(0.2)
    trainer = int(next(pause.glob("paused-*")).name.split("-")[1])
    return worker, trainer, pause


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_killing_the_run_worker_kills_its_training_and_a_reexecution_resumes(world, tmp_path):
    instance, engine, home = world
    worker, trainer, pause = _start_paused_run(home, tmp_path, "AAPL", "NVDA")
    descendants = process_tree(worker.pid)
    assert trainer in descendants
    worker.send_signal(signal.SIGKILL)
    worker.wait()
    killed_at = dt.datetime.now(dt.UTC)
    # Workers die with their parent: nothing of the run survives it for more than a moment.
    assert wait_dead(descendants, 10) == []
    (pause / "release").write_text("")  # an orphan would now register its candidate
    time.sleep(3)
    with engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(model_registry)).scalar() == 0
    with engine.connect() as conn:
        late = conn.execute(select(func.count()).where(model_registry.c.created_at >= killed_at)).scalar()
    assert late == 0

    # Meanwhile NVDA got its candidate (as if its chunk had finished before the kill). Re-executing the
    # killed run (run monitoring marked it failed) trains only what is missing.
    (run,) = instance.get_runs()
    instance.report_run_failed(run)
    # What run monitoring does `free_slots_after_run_end_seconds` after a run's end (no daemon here).
    instance.event_log_storage.free_concurrency_slots_for_run(run.run_id)
    settings = Settings.from_env(
        home=Path(os.environ["LDTM_HOME"]), database_url=os.environ["LDTM_DATABASE_URL"]
    )
    cfg = get_profile("demo", max_epochs=1)
    msft = train_ticker(engine, settings, "NVDA", cfg, "demo", threads=1)
    assert msft.status == "trained"
    job = ReconstructableJob.for_file(JOB_FILE, "checkpoints_job")
    again = execute_job(
        job,
        instance=instance,
        reexecution_options=ReexecutionOptions(parent_run_id=run.run_id),
        tags=run.tags,  # what a UI re-execution carries over: the partition range
    )
    assert again.success
    with engine.connect() as conn:
        rows = conn.execute(select(model_registry.c.ticker, model_registry.c.id)).all()
    assert sorted(t for t, _ in rows) == ["AAPL", "NVDA"]
    assert [i for t, i in rows if t == "NVDA"] == [msft.model_id]


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_a_run_marked_failed_stops_its_training_steps(world, tmp_path):
    instance, engine, home = world
    worker, trainer, pause = _start_paused_run(home, tmp_path, "AAPL", "NVDA")
    try:
        time.sleep(2)  # let the other chunk's step reach training too (or its own pause)
        steps = step_processes(worker.pid)
        assert trainer in steps
        (run,) = DagsterInstance.get().get_runs()
        instance.report_run_failed(run)  # what run monitoring or a cancel does while the step lives
        # Every step polls its run's status every 2 s and stops itself; only then is anything released.
        assert wait_dead(steps, 15) == []
        (pause / "release").write_text("")
        time.sleep(3)
        with engine.connect() as conn:
            assert conn.execute(select(func.count()).select_from(model_registry)).scalar() == 0
    finally:
        (pause / "release").write_text("")
        worker.kill()  # the run worker may wait on the dead step forever; it is this test's process
        worker.wait(timeout=60)
