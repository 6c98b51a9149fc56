"""Three `gpu` steps that each hold the product's slot lease (`gpu_slot_lease`) while they work, and
record when they held it. Run as a script it is a run worker: `python three_gpu_steps.py DIR URL`
executes one run (up to 3 steps at once) on $DAGSTER_HOME's instance. A step holds its lease until
DIR/release exists, so the test decides when they end."""

import json
import sys
import time
from pathlib import Path

from dagster import (
    Config,
    DagsterInstance,
    Definitions,
    OpExecutionContext,
    asset,
    define_asset_job,
    execute_job,
    reconstructable,
)

from ldtm_dagster.gpu_pool import GPU_POOL, gpu_slot_lease


class StepConfig(Config):
    out_dir: str
    database_url: str


def _hold(context: OpExecutionContext, name: str, config: StepConfig) -> None:
    out = Path(config.out_dir)
    with gpu_slot_lease(context, config.database_url):
        start = time.time()
        (out / f"{name}.holding").write_text("")
        deadline = time.monotonic() + 120
        while not (out / "release").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        (out / f"{name}.json").write_text(json.dumps({"start": start, "end": time.time()}))


@asset(pool=GPU_POOL)
def gpu_step_a(context: OpExecutionContext, config: StepConfig) -> None:
    _hold(context, "a", config)


@asset(pool=GPU_POOL)
def gpu_step_b(context: OpExecutionContext, config: StepConfig) -> None:
    _hold(context, "b", config)


@asset(pool=GPU_POOL)
def gpu_step_c(context: OpExecutionContext, config: StepConfig) -> None:
    _hold(context, "c", config)


def three_gpu_steps_job():
    return Definitions(
        assets=[gpu_step_a, gpu_step_b, gpu_step_c], jobs=[define_asset_job("three_gpu_steps")]
    ).resolve_job_def("three_gpu_steps")


if __name__ == "__main__":
    out_dir, url = sys.argv[1:3]
    cfg = {"config": {"out_dir": out_dir, "database_url": url}}
    run_config = {
        "ops": {f"gpu_step_{n}": cfg for n in "abc"},
        "execution": {"config": {"multiprocess": {"max_concurrent": 3}}},
    }
    with DagsterInstance.get() as instance:
        result = execute_job(reconstructable(three_gpu_steps_job), instance=instance, run_config=run_config)
        sys.exit(0 if result.success else 1)
