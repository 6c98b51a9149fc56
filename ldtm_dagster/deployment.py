"""Where the code location runs, from the environment: the executor, the GPU steps' pod tags and the
`gpu` pool's slot plan that follow from it.

`LDTM_DEPLOYMENT` = `local` (default) | `docker` | `k8s`. Elsewhere than k8s, a run's steps are processes
that Dagster's multiprocess executor forks from a forkserver which imported the code location once
(`start_method: forkserver` by default): a step starts in about a second instead of importing torch,
scipy and the whole code location again (5-8 s a step on 2 cores). The run config may still choose
`in_process`, or `start_method: spawn`. Only `k8s` changes anything else:

- every job runs with `k8s_job_executor`: one pod per step, so each checkpoints/backtests chunk
  step of the `gpu` pool is its own pod;
- every `gpu` pool step carries the op tag `dagster-k8s/config`: with `LDTM_K8S_GPU_PER_STEP`
  (default on) its pod requests `nvidia.com/gpu: 1`, off it gets a CPU pod; both request
  `LDTM_K8S_STEP_CPU` / `LDTM_K8S_STEP_MEMORY`;
- the pool limit is the cluster's, set on the instance (`dagster instance concurrency set gpu N` or
  the Helm values' `concurrency.pools.defaultLimit`): NVML in the daemon's or a run worker's pod
  describes one node (usually none of its GPUs), so nothing here writes the limit from it.

Read when the code location is imported: the gRPC server and every run/step pod import it with
the same environment, so they agree on the tags.
"""

from __future__ import annotations

from ldtm_core.config import env_text, setting_flag
from ldtm_core.errors import InputError
from ldtm_core.learning.gpu_slots import SlotPlan

DEPLOYMENT_ENV = "LDTM_DEPLOYMENT"
DEPLOYMENTS = ("local", "docker", "k8s")
GPU_PER_STEP_ENV = "LDTM_K8S_GPU_PER_STEP"
STEP_CPU_ENV = "LDTM_K8S_STEP_CPU"
STEP_MEMORY_ENV = "LDTM_K8S_STEP_MEMORY"
DEFAULT_STEP_CPU = "1"
DEFAULT_STEP_MEMORY = "2Gi"
K8S_CONFIG_TAG = "dagster-k8s/config"  # the tag dagster-k8s reads a step's pod config from
GPU_RESOURCE = "nvidia.com/gpu"  # the NVIDIA device plugin's resource name


def deployment() -> str:
    value = env_text(DEPLOYMENT_ENV, "").strip().lower() or "local"
    if value not in DEPLOYMENTS:
        raise InputError(f"{DEPLOYMENT_ENV}={value!r} is not one of {', '.join(DEPLOYMENTS)}")
    return value


def is_k8s() -> bool:
    return deployment() == "k8s"


def gpu_per_step() -> bool:
    """Whether a `gpu` pool step's pod requests one GPU (`LDTM_K8S_GPU_PER_STEP`, default on)."""
    return setting_flag(GPU_PER_STEP_ENV)


def gpu_step_resources() -> dict:
    """The container resources of one `gpu` pool step's pod."""
    requests = {
        "cpu": env_text(STEP_CPU_ENV, DEFAULT_STEP_CPU),
        "memory": env_text(STEP_MEMORY_ENV, DEFAULT_STEP_MEMORY),
    }
    if not gpu_per_step():
        return {"requests": requests}
    # Extended resources are requested through limits (the request defaults to the limit).
    return {"requests": requests, "limits": {GPU_RESOURCE: "1"}}


def gpu_step_tags() -> dict:
    """Op tags of every `gpu` pool step: its pod's resources on k8s, nothing elsewhere."""
    if not is_k8s():
        return {}
    return {K8S_CONFIG_TAG: {"container_config": {"resources": gpu_step_resources()}}}


def executor():
    """The executor of every job: `k8s_job_executor` on k8s, elsewhere Dagster's multi-or-in-process
    executor with the forkserver as its default start method."""
    if not is_k8s():
        from dagster import multi_or_in_process_executor

        return multi_or_in_process_executor.configured(
            _forkserver_by_default,
            name="multi_or_in_process",
            config_schema=multi_or_in_process_executor.config_schema.as_field(),
        )
    from dagster_k8s import k8s_job_executor  # imported only here: the kubernetes client is heavy

    return k8s_job_executor


def _forkserver_by_default(config: dict) -> dict:
    """The run's executor config, with `start_method: forkserver` unless it runs in process or names one.
    The forkserver imports the code location (`ldtm_dagster`) once; each step is forked from it, with the run
    worker's environment (a run worker runs one run: a new process per run, or per container)."""
    if "in_process" in config:
        return config
    multiprocess = dict(config.get("multiprocess") or {})
    multiprocess.setdefault("start_method", {"forkserver": {"preload_modules": ["ldtm_dagster"]}})
    return {"multiprocess": multiprocess}


def cluster_plan(limit: int | None) -> SlotPlan:
    """The slot plan of a fanned-out run on k8s: as many chunks as the instance's `gpu` limit, each in
    its own pod; with a GPU per step every pod sees its one GPU as cuda:0."""
    if limit is None or limit < 1:
        raise InputError(
            f"{DEPLOYMENT_ENV}=k8s: the instance's gpu pool has no limit ({limit}); set it to the "
            "cluster's GPUs with `dagster instance concurrency set gpu N` or the Helm values' "
            "concurrency.pools.defaultLimit"
        )
    if gpu_per_step():
        return SlotPlan(
            per_gpu=[(0, 0, limit)],
            total=limit,
            kind="cuda",
            reason=f"k8s: up to {limit} step pod(s) at once (gpu pool limit), each with one {GPU_RESOURCE}",
        )
    return SlotPlan(total=limit, kind="cpu", reason=f"k8s: up to {limit} CPU step pod(s) (gpu pool limit)")
