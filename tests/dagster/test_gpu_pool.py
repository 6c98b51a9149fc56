"""With the `gpu` pool at 1 (set by gpu_pool_sensor from a crowded fake GPU), two GPU steps of one
multiprocess run never overlap: the limit holds inside a run, on a real instance."""

import json
from pathlib import Path

import pytest
from dagster import build_sensor_context, execute_job
from dagster._core.definitions.reconstruct import ReconstructableJob
from ldtm_dagster_helpers import FakeGpuProbe, FakeNVML

from ldtm_dagster.gpu_pool import GPU_POOL
from ldtm_dagster.sensors import gpu_pool_sensor

JOB_FILE = str(Path(__file__).with_name("two_gpu_steps.py"))


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
