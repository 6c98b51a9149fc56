"""With the `gpu` pool at 1 (set by gpu_pool_sensor from a crowded fake GPU), two GPU steps of one
multiprocess run never overlap: the limit holds inside a run, on a real instance."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from dagster import build_sensor_context, execute_job
from dagster._core.definitions.reconstruct import ReconstructableJob
from ldtm_dagster_helpers import REPO, FakeGpuProbe, FakeNVML

from ldtm_dagster.gpu_pool import GPU_POOL
from ldtm_dagster.sensors import gpu_pool_sensor

JOB_FILE = str(Path(__file__).with_name("two_gpu_steps.py"))
THREE_STEPS = str(Path(__file__).with_name("three_gpu_steps.py"))


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_limit_one_serialises_gpu_steps_within_one_multiprocess_run(dagster_instance, fake_nvml, tmp_path):
    # 1700 MiB free: floor((1700 - 1024) / 600) = 1 slot.
    fake_nvml["module"] = FakeNVML([("crowded", 24576, 1700)])
    gpu_pool_sensor(build_sensor_context(instance=dagster_instance, resources={"gpu": FakeGpuProbe()}))
    assert dagster_instance.event_log_storage.get_concurrency_info(GPU_POOL).slot_count == 1

    cfg = {"config": {"out_dir": str(tmp_path)}}
    result = execute_job(
        ReconstructableJob.for_file(JOB_FILE, "two_gpu_steps_job"),
        instance=dagster_instance,
        run_config={"ops": {"gpu_step_a": cfg, "gpu_step_b": cfg}},
    )
    assert result.success
    a, b = (json.loads((tmp_path / f"{n}.json").read_text()) for n in "ab")
    first, second = sorted([a, b], key=lambda s: s["start"])
    assert first["end"] <= second["start"], f"GPU steps overlapped: {a} {b}"
    blocked = [e for e in result.all_events if "blocked by limit for pool gpu" in (e.message or "")]
    assert blocked, "the second step never waited for the pool"
    assert dagster_instance.event_log_storage.get_concurrency_info(GPU_POOL).active_slot_count == 0


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_step_the_instance_admits_over_its_limit_waits_for_a_lease(dagster_instance, tmp_path):
    """Dagster's pool can run a step over its limit: with two steps holding the pool's 2 slots, a dip of
    the limit to 1 and back (what gpu_pool_sensor does when free VRAM dips) marks a held slot deleted and
    adds a free one, so the third step is admitted while both others still run. It then waits for one
    of the 2 leases in the app database (`gpu_slot_lease`): never 3 at once."""
    storage = dagster_instance.event_log_storage
    storage.set_concurrency_slots(GPU_POOL, 2)
    url = f"sqlite:///{tmp_path / 'ldtm.db'}"  # the lease needs the database's folder, not its tables
    env = {**os.environ, "DAGSTER_HOME": dagster_instance.root_directory}
    worker = subprocess.Popen([sys.executable, THREE_STEPS, str(tmp_path), url], env=env, cwd=REPO)
    try:
        _until(lambda: len(list(tmp_path.glob("*.holding"))) == 2, worker, "two steps holding their leases")
        storage.set_concurrency_slots(GPU_POOL, 1)
        storage.set_concurrency_slots(GPU_POOL, 2)
        (run,) = dagster_instance.get_runs()

        def third_admitted() -> bool:
            claimed = storage.get_concurrency_info(GPU_POOL).claimed_slots
            return len({slot.step_key for slot in claimed}) == 3

        _until(third_admitted, worker, "the instance admitting the third step over its limit of 2")

        def third_holds_or_waits() -> bool:
            waiting = any(
                "gpu slot lease(s) are held" in (e.message or "")
                for e in dagster_instance.all_logs(run.run_id)
            )
            return waiting or len(list(tmp_path.glob("*.holding"))) == 3

        _until(third_holds_or_waits, worker, "the third step holding or waiting for a lease")
        (tmp_path / "release").write_text("")
        assert worker.wait(timeout=120) == 0
    finally:
        worker.kill()
    spans = [json.loads((tmp_path / f"{n}.json").read_text()) for n in "abc"]
    first, second, third = sorted(spans, key=lambda s: s["start"])
    assert third["start"] >= min(first["end"], second["end"]), f"three gpu steps at once: {spans}"


def _until(condition, worker, what: str, seconds: float = 120) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert worker.poll() is None, f"the run ended before {what}"
        assert time.monotonic() < deadline, f"no {what} within {seconds:.0f} s"
        time.sleep(0.2)
