"""Two independent steps in the `gpu` pool that record when they ran (loaded by file path by the
multiprocess executor, so it imports nothing from the test directory)."""

import json
import time
from pathlib import Path

from dagster import Config, Definitions, asset, define_asset_job

from ldtm_dagster.gpu_pool import GPU_POOL


class StepConfig(Config):
    out_dir: str


def _record(name: str, out_dir: str) -> None:
    start = time.time()
    time.sleep(1.5)
    Path(out_dir, f"{name}.json").write_text(json.dumps({"start": start, "end": time.time()}))


@asset(pool=GPU_POOL)
def gpu_step_a(config: StepConfig) -> None:
    _record("a", config.out_dir)


@asset(pool=GPU_POOL)
def gpu_step_b(config: StepConfig) -> None:
    _record("b", config.out_dir)


def two_gpu_steps_job():
    return Definitions(
        assets=[gpu_step_a, gpu_step_b], jobs=[define_asset_job("two_gpu_steps")]
    ).resolve_job_def("two_gpu_steps")
