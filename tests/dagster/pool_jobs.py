"""The real fanned-out `checkpoints` (and `backtests`) assets as jobs the multiprocess executor can reload
by file path; resources come from LDTM_* environment variables (inherited by the step processes). Run
as a script it is a run worker: `python pool_jobs.py FIRST LAST [checkpoints|retrain]` executes one
range run of that job on $DAGSTER_HOME's instance."""

import sys

from dagster import DagsterInstance, Definitions, define_asset_job, execute_job, reconstructable

from ldtm_dagster import deployment
from ldtm_dagster.assets import backtests, checkpoints
from ldtm_dagster.partitions import range_tags
from ldtm_dagster.resources import resources_from_env


def checkpoints_job():
    return Definitions(
        assets=[checkpoints],
        jobs=[define_asset_job("checkpoints_only")],
        resources=resources_from_env(),
        executor=deployment.executor(),  # the product's: steps forked from a forkserver
    ).resolve_job_def("checkpoints_only")


def retrain_job():
    """What `retrain_job` runs after `features`: training, then the backtests of the new candidates."""
    return Definitions(
        assets=[checkpoints, backtests],
        jobs=[define_asset_job("retrain")],
        resources=resources_from_env(),
        executor=deployment.executor(),
    ).resolve_job_def("retrain")


if __name__ == "__main__":
    first, last = sys.argv[1:3]
    job = {"checkpoints": checkpoints_job, "retrain": retrain_job}[
        sys.argv[3] if len(sys.argv) > 3 else "checkpoints"
    ]
    with DagsterInstance.get() as instance:
        result = execute_job(reconstructable(job), instance=instance, tags=range_tags([first, last]))
        sys.exit(0 if result.success else 1)
