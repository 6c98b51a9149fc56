"""The code location: every asset, check, job, schedule and sensor, with resources from the environment."""

from __future__ import annotations

from dagster import Definitions

from ldtm_core.config import check_environment
from ldtm_core.learning.recipes import challenger_recipes

from . import assets, checks, deployment
from .alert_sensors import run_failure_alert, snapshots_freshness_alert
from .gpu_pool import mark_pool_processes
from .heartbeat import nightly_heartbeat
from .jobs import (
    backtests_job,
    external_judgement_job,
    nightly_job,
    nightly_market_job,
    promotion_job,
    recipe_decision_job,
    recipe_refit_job,
    retrain_job,
    submission_job,
)
from .resources import resources_from_env
from .schedules import nightly, weekly_recipe_refit, weekly_retrain
from .sensors import (
    gpu_pool_sensor,
    judge_after_nightly,
    nightly_after_market,
    promotion_gate_sensor,
    recipe_decision_sensor,
    retrain_backtests_sensor,
    submission_sensor,
)

# A bad setting (or a placeholder password) is the code location's load error, shown in the UI, before any
# sensor, schedule or run uses it.
check_environment()
challenger_recipes()  # LDTM_CHALLENGER_RECIPES names global recipes

# Before any run worker or step process is started from this code location, so each inherits the marker.
mark_pool_processes()

defs = Definitions(
    assets=[getattr(assets, name) for name in assets.__all__],
    asset_checks=checks.ALL_CHECKS,
    jobs=[
        nightly_market_job,
        nightly_job,
        retrain_job,
        promotion_job,
        backtests_job,
        recipe_refit_job,
        recipe_decision_job,
        submission_job,
        external_judgement_job,
    ],
    schedules=[nightly, weekly_retrain, weekly_recipe_refit],
    sensors=[
        gpu_pool_sensor,
        promotion_gate_sensor,
        nightly_after_market,
        retrain_backtests_sensor,
        recipe_decision_sensor,
        submission_sensor,
        judge_after_nightly,
        run_failure_alert,
        snapshots_freshness_alert,
        nightly_heartbeat,
    ],
    resources=resources_from_env(),
    # k8s_job_executor on Kubernetes (LDTM_DEPLOYMENT=k8s), elsewhere Dagster's multiprocess executor
    # forking each step from a forkserver that imported the code location once.
    executor=deployment.executor(),
)
