"""The real `checkpoints` asset as a job the multiprocess executor can reload by file path; resources
come from LDTM_* environment variables (inherited by the step processes). Run as a script, it is a
run worker: `python checkpoints_job.py FIRST LAST` executes one range run on $DAGSTER_HOME's instance."""

import sys

from dagster import DagsterInstance, Definitions, define_asset_job, execute_job, reconstructable

from ldtm_dagster.assets import checkpoints
from ldtm_dagster.resources import resources_from_env


def checkpoints_job():
    return Definitions(
        assets=[checkpoints], jobs=[define_asset_job("checkpoints_only")], resources=resources_from_env()
    ).resolve_job_def("checkpoints_only")


def range_tags(first: str, last: str) -> dict:
    return {"dagster/asset_partition_range_start": first, "dagster/asset_partition_range_end": last}


if __name__ == "__main__":
    with DagsterInstance.get() as instance:
        result = execute_job(
            reconstructable(checkpoints_job), instance=instance, tags=range_tags(*sys.argv[1:3])
        )
        sys.exit(0 if result.success else 1)
