"""A retrain run launched by a real `dagster-daemon` whose run worker is SIGKILLed: Dagster marks the run
failed, no training process of it survives, nothing is registered after its end, and run monitoring
gives its `gpu` slots back (issue 12, measured then under `dagster dev`: orphans kept registering)."""

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from dagster import DagsterInstance, DagsterRunStatus
from ldtm_dagster_helpers import REPO, dagster_cli_env, process_tree, stop_group, wait_dead
from sqlalchemy import func, select

from ldtm_core.data.ingest import ingest_synthetic
from ldtm_core.db import get_engine
from ldtm_core.schema import model_registry
from ldtm_dagster.gpu_pool import GPU_POOL
from ldtm_dagster.partitions import range_tags

BIN = Path(sys.executable).parent


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()[:200]
    except OSError:
        return f"{pid} (gone)"


def _wait(what: str, seconds: float, probe):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        got = probe()
        if got:
            return got
        time.sleep(0.25)
    raise AssertionError(f"timed out after {seconds} s waiting for {what}")


@pytest.mark.slow
@pytest.mark.timeout(480)
def test_killing_a_daemon_launched_run_worker_stops_its_training_and_frees_its_slots(
    sqlite_url, tmp_path, monkeypatch
):
    engine = get_engine(sqlite_url)
    ingest_synthetic(engine, ["AAPL", "NVDA"], "2023-01-03", "2024-06-28", seed=0)
    pause = tmp_path / "pause"
    pause.mkdir()
    # The repo's settings, with run monitoring polling often enough for a test to wait on it.
    env = dagster_cli_env(
        tmp_path,
        run_monitoring={"free_slots_after_run_end_seconds": 5, "poll_interval_seconds": 2},
        database_url=sqlite_url,
        universe="demo",
        profile="demo",
        max_epochs=1,
        gpu_max_slots=2,
        test_pause_at="train.before_register",
        test_pause_dir=pause,
        test_pause_s=180,
    )
    home = env["DAGSTER_HOME"]
    log = (tmp_path / "daemon.log").open("w")
    daemon = subprocess.Popen(
        [str(BIN / "dagster-daemon"), "run", "-w", "workspace.yaml"],
        cwd=REPO,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    run_id = str(uuid.uuid4())
    try:
        # Queued on the instance; the daemon dequeues it and launches its run worker.
        launch = subprocess.run(
            [str(BIN / "dagster"), "job", "launch", "-w", "workspace.yaml", "-j", "retrain_job"]
            + ["--run-id", run_id, "--tags", json.dumps(range_tags(["AAPL", "NVDA"]))],
            cwd=REPO,
            env=env,
            timeout=180,
            capture_output=True,
            text=True,
        )
        assert launch.returncode == 0, launch.stderr[-3000:]
        try:
            paused = _wait("a training step at the pause point", 300, lambda: list(pause.glob("paused-*")))
        except AssertionError as exc:  # say why: a daemon that never launched the run, a failed step
            log.flush()
            raise AssertionError(
                f"{exc}; daemon log tail:\n{(tmp_path / 'daemon.log').read_text()[-3000:]}"
            ) from None
        trainer = int(paused[0].name.split("-")[1])
        run_worker = int(
            Path(f"/proc/{trainer}/stat").read_text().split(")")[-1].split()[1]
        )  # ppid: the run worker
        tree = process_tree(run_worker)
        assert trainer in tree
        os.kill(run_worker, signal.SIGKILL)
        killed_at = time.monotonic()
        # Every step (and its pool workers) dies with the run worker: no orphan training.
        survivors = wait_dead(tree, 10)
        assert survivors == [], [_cmdline(p) for p in survivors]
        (pause / "release").write_text("")  # an orphan would now register its candidate

        monkeypatch.setenv("DAGSTER_HOME", home)
        with DagsterInstance.get() as instance:
            _wait(
                "the run marked failed",
                60,
                lambda: instance.get_run_by_id(run_id).status == DagsterRunStatus.FAILURE,
            )
            failed_after = time.monotonic() - killed_at
            _wait(
                "run monitoring to free the run's gpu slots",
                60,
                lambda: (
                    not [
                        s
                        for s in instance.event_log_storage.get_concurrency_info(GPU_POOL).claimed_slots
                        if s.run_id == run_id
                    ]
                ),
            )
        assert failed_after < 60
        time.sleep(3)
        with engine.connect() as conn:
            assert conn.execute(select(func.count()).select_from(model_registry)).scalar() == 0
    finally:
        (pause / "release").write_text("")
        stop_group(daemon, 30)
        log.close()
