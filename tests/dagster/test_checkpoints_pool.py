"""The `checkpoints` graph asset holds one `gpu` slot per training process, follows the slot plan from
its first run, resumes a killed retrain, and leaves no orphan training process behind a dead run."""

import datetime as dt
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from dagster import AssetKey, DagsterInstance, ReexecutionOptions, execute_job, instance_for_test
from dagster._core.definitions.reconstruct import ReconstructableJob
from ldtm_dagster_helpers import REPO, repo_instance_config
from sqlalchemy import func, select

from ldtm_core.config import Settings
from ldtm_core.data.ingest import ingest_synthetic
from ldtm_core.db import get_engine
from ldtm_core.learning.model import get_profile
from ldtm_core.learning.training import train_ticker
from ldtm_core.schema import model_registry
from ldtm_dagster.pool import GPU_POOL

JOB_FILE = str(Path(__file__).with_name("checkpoints_job.py"))
TICKERS = ["AAPL", "NVDA", "TSLA", "QQQ"]  # demo universe order: run A takes the first two, run B the rest


@pytest.fixture
def world(sqlite_url, tmp_path, monkeypatch):
    """Prices for four tickers, LDTM_* resources for the step processes, an instance on disk."""
    ingest_synthetic(get_engine(sqlite_url), TICKERS, "2023-01-03", "2024-06-28", seed=0)
    env = {
        "LDTM_HOME": str(tmp_path / "ldtm"),
        "LDTM_DATABASE_URL": sqlite_url,
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
        yield instance, get_engine(sqlite_url), home


def _tags(first, last):
    return {"dagster/asset_partition_range_start": first, "dagster/asset_partition_range_end": last}


def _max_overlap(spans) -> int:
    events = sorted(
        [(s, 1) for _, s, _ in spans] + [(e, -1) for _, _, e in spans], key=lambda x: (x[0], x[1])
    )
    live = peak = 0
    for _, d in events:
        live += d
        peak = max(peak, live)
    return peak


@pytest.mark.timeout(600)
def test_two_retrains_on_a_limit_of_two_never_train_more_than_two_at_once(world):
    instance, engine, home = world
    assert instance.event_log_storage.get_concurrency_info(GPU_POOL).slot_count in (0, 1)  # before any run
    # Two run workers started together, as two launched runs would be.
    env = {**os.environ, "DAGSTER_HOME": str(home)}
    workers = [
        subprocess.Popen([sys.executable, JOB_FILE, first, last], env=env, cwd=REPO)
        for first, last in (("AAPL", "NVDA"), ("TSLA", "QQQ"))
    ]
    assert [w.wait(timeout=540) for w in workers] == [0, 0]
    # The first run set the pool to the slot plan (2), with no sensor tick and no daemon.
    info = instance.event_log_storage.get_concurrency_info(GPU_POOL)
    assert info.slot_count == 2 and info.active_slot_count == 0
    records = instance.fetch_materializations(AssetKey("checkpoints"), limit=20).records
    by_run = {r.run_id: r.asset_materialization.metadata["train_spans"].value for r in records}
    assert len(by_run) == 2
    spans = [s for run_spans in by_run.values() for s in run_spans]
    assert len(spans) == 4 and len({pid for pid, _, _ in spans}) == 4  # one step process per chunk
    assert _max_overlap(spans) <= 2, spans
    with engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(model_registry)).scalar() == 4


def _children(pid: int) -> list[int]:
    out = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        kids = (task / "children").read_text().split()
        out += [int(k) for k in kids]
    return out + [g for k in out for g in _children(k)]


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


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


def _wait_dead(pids, seconds):
    deadline = time.monotonic() + seconds
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    return [p for p in pids if _alive(p)]


@pytest.mark.timeout(600)
def test_killing_the_run_worker_kills_its_training_and_a_reexecution_resumes(world, tmp_path):
    instance, engine, home = world
    worker, trainer, pause = _start_paused_run(home, tmp_path, "AAPL", "NVDA")
    descendants = _children(worker.pid)
    assert trainer in descendants
    worker.send_signal(signal.SIGKILL)
    worker.wait()
    killed_at = dt.datetime.now(dt.UTC)
    # Workers die with their parent: nothing of the run survives it for more than a moment.
    assert _wait_dead(descendants, 10) == []
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


@pytest.mark.timeout(400)
def test_a_run_marked_failed_stops_its_training_steps(world, tmp_path):
    instance, engine, home = world
    worker, trainer, pause = _start_paused_run(home, tmp_path, "AAPL", "NVDA")
    try:
        time.sleep(2)  # let the other chunk's step reach training too (or its own pause)
        steps = [p for p in _children(worker.pid) if p != worker.pid]
        assert trainer in steps
        (run,) = DagsterInstance.get().get_runs()
        instance.report_run_failed(run)  # what run monitoring or a cancel does while the step lives
        # Every step polls its run's status every 2 s and stops itself; only then is anything released.
        assert _wait_dead(steps, 15) == []
        (pause / "release").write_text("")
        time.sleep(3)
        with engine.connect() as conn:
            assert conn.execute(select(func.count()).select_from(model_registry)).scalar() == 0
    finally:
        (pause / "release").write_text("")
        worker.kill()  # the run worker may wait on the dead step forever; it is this test's process
        worker.wait(timeout=60)
