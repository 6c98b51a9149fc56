"""Kubernetes deployment (deploy/k8s/values.yaml, LDTM_DEPLOYMENT=k8s), tested as dagster-k8s's own unit
tests test the launcher and the executor: no cluster. The K8sRunLauncher is configured from the Helm
values the way the chart's instance template maps them, the code location's container context the way
`includeConfigInLaunchedRuns` passes it, and a fake batch API receives the Job bodies that
K8sRunLauncher (the run pod) and the k8s_job_executor's step handler (one pod per step) would create.
"""

from __future__ import annotations

import contextlib
import json
import sys
from unittest import mock

import pytest
import yaml
from dagster import DagsterInstance, build_op_context, build_sensor_context, instance_for_test
from dagster._config import process_config, resolve_to_config_type
from dagster._core.code_pointer import ModuleCodePointer
from dagster._core.definitions.job_base import InMemoryJob
from dagster._core.execution.api import create_execution_plan
from dagster._core.execution.context.system import PlanData, PlanOrchestrationContext
from dagster._core.execution.context_creation_job import create_context_free_log_manager
from dagster._core.execution.plan.state import KnownExecutionState
from dagster._core.execution.retries import RetryMode
from dagster._core.executor.init import InitExecutorContext
from dagster._core.executor.step_delegating.step_handler.base import StepHandlerContext
from dagster._core.launcher import LaunchRunContext
from dagster._core.origin import JobPythonOrigin, RepositoryPythonOrigin
from dagster._core.test_utils import create_run_for_test
from dagster._grpc.types import ExecuteStepArgs
from dagster_k8s import K8sRunLauncher
from dagster_k8s.container_context import K8sContainerContext
from dagster_k8s.executor import _K8S_EXECUTOR_CONFIG_SCHEMA, K8sStepHandler, k8s_job_executor
from kubernetes.client import ApiClient
from ldtm_dagster_helpers import REPO, FakeGpuProbe, FakeNVML

from ldtm_core.errors import InputError, LDTMError
from ldtm_core.learning import gpu_slots
from ldtm_dagster import deployment
from ldtm_dagster.gpu_pool import GPU_POOL, chunk_slot_plan, plan_chunk_slots, pool_limit
from ldtm_dagster.sensors import gpu_pool_sensor

VALUES = yaml.safe_load((REPO / "deploy/k8s/values.yaml").read_text())
PVC = yaml.safe_load((REPO / "deploy/k8s/artifacts-pvc.yaml").read_text())
RELEASE = NAMESPACE = "ldtm"
ARTIFACTS = "/opt/ldtm/artifacts"
GPU = deployment.GPU_RESOURCE
# The fanned-out steps of the retrain job, with one chunk each (the executor's known state).
RETRAIN_DYNAMIC = {
    "checkpoints.plan_checkpoint_chunks": {"chunks": ["chunk_0"]},
    "backtests.plan_backtest_chunks": {"chunks": ["chunk_0"]},
}
MINIMAL_KUBECONFIG = """
apiVersion: v1
kind: Config
current-context: fake-context
contexts:
  - context: {cluster: fake-cluster}
    name: fake-context
clusters:
  - cluster: {}
    name: fake-cluster
"""


def _user_deployment() -> dict:
    (ldtm,) = VALUES["dagster-user-deployments"]["deployments"]
    return ldtm


def _image() -> str:
    image = _user_deployment()["image"]
    return f"{image['repository']}:{image['tag']}"


def _launcher_config(kubeconfig: str) -> dict:
    """runLauncher.config.k8sRunLauncher as the chart's `dagsterYaml.runLauncher.k8s` template renders
    it into the instance's run_launcher config (in a cluster: load_incluster_config true)."""
    k8s = VALUES["runLauncher"]["config"]["k8sRunLauncher"]
    run_k8s = k8s.get("runK8sConfig", {})
    return {
        "load_incluster_config": False,
        "kubeconfig_file": kubeconfig,
        "job_namespace": k8s.get("jobNamespace") or NAMESPACE,
        "image_pull_policy": k8s["imagePullPolicy"],
        "service_account_name": f"{RELEASE}-dagster",
        "dagster_home": VALUES.get("global", {}).get("dagsterHome", "/opt/dagster/dagster_home"),
        "instance_config_map": f"{RELEASE}-dagster-instance",
        "postgres_password_secret": VALUES["global"]["postgresqlSecretName"],
        "env_config_maps": [c["name"] for c in k8s.get("envConfigMaps", [])],
        "env_secrets": [s["name"] for s in k8s.get("envSecrets", [])],
        "env_vars": k8s.get("envVars", []),
        "volume_mounts": k8s.get("volumeMounts", []),
        "volumes": k8s.get("volumes", []),
        "fail_pod_on_run_failure": bool(k8s.get("failPodOnRunFailure")),
        "run_k8s_config": {"container_config": run_k8s["containerConfig"]} if run_k8s else {},
    }


def _code_location_container_context() -> dict:
    """What `includeConfigInLaunchedRuns` hands every run of the code location (its env, Secrets, volumes)."""
    ldtm = _user_deployment()
    return {
        "k8s": {
            "env": ldtm["env"],
            "env_secrets": [s["name"] for s in ldtm["envSecrets"]],
            "volume_mounts": ldtm["volumeMounts"],
            "volumes": ldtm["volumes"],
        }
    }


def _job_origin(job_name: str) -> JobPythonOrigin:
    return JobPythonOrigin(
        job_name=job_name,
        repository_origin=RepositoryPythonOrigin(
            executable_path=sys.executable,
            code_pointer=ModuleCodePointer("ldtm_dagster", "defs", None),
            container_image=_image(),
            entry_point=["dagster"],
            container_context=_code_location_container_context(),
        ),
    )


@contextlib.contextmanager
def _ldtm_dagster_imported_with(env: dict):
    """ldtm_dagster imported afresh with `env` (its op tags and executor are read at import), and the
    modules the rest of the session imported put back afterwards."""
    ours = [n for n in sys.modules if n == "ldtm_dagster" or n.startswith("ldtm_dagster.")]
    saved = {n: sys.modules.pop(n) for n in ours}
    try:
        with mock.patch.dict("os.environ", env):
            import ldtm_dagster

            yield ldtm_dagster.defs
    finally:
        for n in [n for n in sys.modules if n == "ldtm_dagster" or n.startswith("ldtm_dagster.")]:
            del sys.modules[n]
        sys.modules.update(saved)


@pytest.fixture(scope="module")
def k8s_defs():
    with _ldtm_dagster_imported_with({"LDTM_DEPLOYMENT": "k8s", "LDTM_K8S_GPU_PER_STEP": "1"}) as defs:
        yield defs


@pytest.fixture(scope="module")
def kubeconfig(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("k8s") / "kubeconfig"
    path.write_text(MINIMAL_KUBECONFIG)
    return str(path)


@pytest.fixture(scope="module")
def k8s_instance(kubeconfig):
    with instance_for_test(
        overrides={
            "run_launcher": {
                "module": "dagster_k8s",
                "class": "K8sRunLauncher",
                "config": _launcher_config(kubeconfig),
            }
        }
    ) as instance:
        yield instance


def _manifest(batch_api: mock.MagicMock) -> dict:
    """The one Job body sent to the fake batch API, as the JSON the API server would receive."""
    (call,) = batch_api.create_namespaced_job.call_args_list
    assert call.kwargs["namespace"] == NAMESPACE
    return ApiClient().sanitize_for_serialization(call.kwargs["body"])


def _container(manifest: dict) -> dict:
    (container,) = manifest["spec"]["template"]["spec"]["containers"]
    return container


def _assert_ldtm_pod(manifest: dict) -> dict:
    """Image, env (from the Secrets) and the artifacts volume every LDTM pod needs; returns the container."""
    container = _container(manifest)
    assert container["image"] == _image()
    env = {e["name"]: e for e in container["env"]}
    assert env["DAGSTER_PG_PASSWORD"]["valueFrom"]["secretKeyRef"] == {
        "name": VALUES["global"]["postgresqlSecretName"],
        "key": "postgresql-password",
    }
    assert env["LDTM_DEPLOYMENT"]["value"] == "k8s"
    assert env["LDTM_HOME"]["value"] == ARTIFACTS
    # LDTM_DATABASE_URL and LDTM_AUDIT_KEY: never a literal value, all keys of the ldtm-secrets Secret.
    assert "LDTM_DATABASE_URL" not in env and "LDTM_AUDIT_KEY" not in env
    assert {"secretRef": {"name": "ldtm-secrets"}} in container["envFrom"]
    (mount,) = [m for m in container["volumeMounts"] if m["mountPath"] == ARTIFACTS]
    volumes = {v["name"]: v for v in manifest["spec"]["template"]["spec"]["volumes"]}
    assert volumes[mount["name"]]["persistentVolumeClaim"]["claimName"] == PVC["metadata"]["name"]
    return container


def test_helm_values_name_what_the_pods_need():
    ldtm = _user_deployment()
    assert ldtm["dagsterApiGrpcArgs"] == ["-m", "ldtm_dagster"]
    assert ldtm["includeConfigInLaunchedRuns"]["enabled"] is True
    assert VALUES["runLauncher"]["type"] == "K8sRunLauncher"
    assert VALUES["postgresql"]["enabled"] is False and VALUES["generatePostgresqlPasswordSecret"] is False
    daemon = VALUES["dagsterDaemon"]
    assert daemon["runMonitoring"]["enabled"] is True and daemon["runMonitoring"]["startTimeoutSeconds"] > 0
    assert daemon["runMonitoring"]["freeSlotsAfterRunEndSeconds"] > 0  # a killed run frees its gpu slots
    assert daemon["runRetries"] == {"enabled": True, "maxRetries": 2, "retryOnAssetOrOpFailure": False}
    assert VALUES["concurrency"]["enabled"] is True
    assert VALUES["concurrency"]["pools"]["granularity"] == "op"
    # The code server and the run launcher agree on the settings every pod reads.
    launcher = VALUES["runLauncher"]["config"]["k8sRunLauncher"]
    env = {e["name"]: e["value"] for e in ldtm["env"]}
    assert {f"{k}={env[k]}" for k in ("LDTM_DEPLOYMENT", "LDTM_K8S_GPU_PER_STEP", "LDTM_HOME")} == set(
        launcher["envVars"]
    )
    assert launcher["volumes"] == ldtm["volumes"] and launcher["volumeMounts"] == ldtm["volumeMounts"]
    assert launcher["envSecrets"] == ldtm["envSecrets"]
    # Run and step pods on different nodes write the same artifacts.
    assert PVC["spec"]["accessModes"] == ["ReadWriteMany"]
    assert not {"password", "LDTM_DATABASE_URL", "LDTM_AUDIT_KEY"} & set(env)


def test_run_pod_of_a_retrain_is_the_user_code_image_with_the_secrets_and_artifacts(k8s_instance, kubeconfig):
    batch_api = mock.MagicMock()
    launcher = K8sRunLauncher(**_launcher_config(kubeconfig), k8s_client_batch_api=batch_api)
    launcher.register_instance(k8s_instance)
    run = create_run_for_test(
        k8s_instance, job_name="retrain_job", job_code_origin=_job_origin("retrain_job")
    )

    launcher.launch_run(LaunchRunContext(dagster_run=run, workspace=None))

    manifest = _manifest(batch_api)
    container = _assert_ldtm_pod(manifest)
    assert container["args"][:3] == ["dagster", "api", "execute_run"]
    assert manifest["metadata"]["labels"]["dagster/run-id"] == run.run_id
    # The run pod only orchestrates: CPU requests from the values, no GPU.
    assert (
        container["resources"]
        == VALUES["runLauncher"]["config"]["k8sRunLauncher"]["runK8sConfig"]["containerConfig"]["resources"]
    )
    assert GPU not in str(container["resources"])


def _executor(instance: DagsterInstance, job_def):
    config = process_config(resolve_to_config_type(_K8S_EXECUTOR_CONFIG_SCHEMA), {})
    assert config.success, config.errors
    return k8s_job_executor.executor_creation_fn(
        InitExecutorContext(
            job=job_def, executor_def=k8s_job_executor, executor_config=config.value, instance=instance
        )
    )


GPU_STEPS = ["checkpoints.train_checkpoint_chunk[chunk_0]", "backtests.backtest_chunk[chunk_0]"]
OTHER_STEPS = ["features", "checkpoints.plan_checkpoint_chunks", "checkpoints.checkpoints_summary"]


@pytest.fixture(scope="module")
def step_manifests(k8s_instance, k8s_defs, kubeconfig) -> dict[str, dict]:
    """The Job body the k8s_job_executor's step handler creates for each of these steps of one retrain run."""
    instance = k8s_instance
    job_def = InMemoryJob(k8s_defs.resolve_job_def("retrain_job"))
    run = create_run_for_test(instance, job_name="retrain_job", job_code_origin=_job_origin("retrain_job"))
    known_state = KnownExecutionState(dynamic_mappings=RETRAIN_DYNAMIC)
    plan = create_execution_plan(job_def, known_state=known_state)
    plan_context = PlanOrchestrationContext(
        plan_data=PlanData(
            job=job_def,
            dagster_run=run,
            instance=instance,
            execution_plan=plan,
            raise_on_error=True,
            retry_mode=RetryMode.DISABLED,
        ),
        log_manager=create_context_free_log_manager(instance, run),
        executor=_executor(instance, job_def),
        output_capture=None,
    )
    manifests = {}
    for step_key in GPU_STEPS + OTHER_STEPS:
        batch_api = mock.MagicMock()
        handler = K8sStepHandler(
            image=None,  # as configured: the image comes from the code location
            container_context=K8sContainerContext(),
            load_incluster_config=False,
            kubeconfig_file=kubeconfig,
            k8s_client_batch_api=batch_api,
        )
        args = ExecuteStepArgs(run.job_code_origin, run.run_id, [step_key], print_serialized_events=False)
        context = StepHandlerContext(
            instance=instance, plan_context=plan_context, steps=plan.steps, execute_step_args=args
        )
        list(handler.launch_step(context))
        manifests[step_key] = _manifest(batch_api)
    return manifests


@pytest.mark.parametrize("step_key", GPU_STEPS)
def test_a_gpu_chunk_step_is_its_own_pod_with_one_gpu(step_manifests, step_key):
    manifest = step_manifests[step_key]
    container = _assert_ldtm_pod(manifest)
    assert container["args"][:3] == ["dagster", "api", "execute_step"]
    assert manifest["metadata"]["labels"]["dagster/op"] == step_key.replace("[", "-").replace("]", "")
    assert container["resources"]["limits"] == {GPU: "1"}
    assert container["resources"]["requests"] == {
        "cpu": deployment.DEFAULT_STEP_CPU,
        "memory": deployment.DEFAULT_STEP_MEMORY,
    }


@pytest.mark.parametrize("step_key", OTHER_STEPS)
def test_other_steps_of_the_retrain_get_no_gpu(step_manifests, step_key):
    container = _assert_ldtm_pod(step_manifests[step_key])
    assert GPU not in str(container.get("resources"))


def test_k8s_uses_the_k8s_executor_and_tags_exactly_the_gpu_pool_steps(k8s_defs):
    for name in ("retrain_job", "nightly_job", "nightly_market_job", "promotion_job", "backtests_job"):
        job = k8s_defs.resolve_job_def(name)
        assert job.executor_def is k8s_job_executor
        for op_def in job.graph.iterate_op_defs():
            tagged = deployment.K8S_CONFIG_TAG in op_def.tags
            assert tagged == (op_def.pool == "gpu"), op_def.name
            if tagged:
                config = json.loads(op_def.tags[deployment.K8S_CONFIG_TAG])
                assert config["container_config"]["resources"]["limits"] == {GPU: "1"}


def test_gpu_per_step_off_gives_cpu_pods_and_a_cpu_plan(monkeypatch):
    monkeypatch.setenv("LDTM_DEPLOYMENT", "k8s")
    monkeypatch.setenv("LDTM_K8S_GPU_PER_STEP", "off")
    monkeypatch.setenv("LDTM_K8S_STEP_MEMORY", "6Gi")
    resources = deployment.gpu_step_tags()[deployment.K8S_CONFIG_TAG]["container_config"]["resources"]
    assert resources == {"requests": {"cpu": "1", "memory": "6Gi"}}
    assert deployment.cluster_plan(3).devices() == ["cpu"] * 3
    monkeypatch.setenv("LDTM_K8S_GPU_PER_STEP", "1")
    # Each step pod sees its one GPU as cuda:0; as many chunks as the cluster's pool limit.
    assert deployment.cluster_plan(3).devices() == ["cuda:0"] * 3


def test_outside_k8s_steps_fork_from_a_forkserver_and_nothing_else_changes(monkeypatch):
    """Outside k8s: Dagster's multi-or-in-process executor, its steps forked from a forkserver that
    imported the code location (unless the run config runs in process or names a start method)."""
    for where in (None, "docker"):
        if where:
            monkeypatch.setenv("LDTM_DEPLOYMENT", where)
        else:
            monkeypatch.delenv("LDTM_DEPLOYMENT", raising=False)
        executor = deployment.executor()
        assert executor.name == "multi_or_in_process" and deployment.gpu_step_tags() == {}
    forked = {"forkserver": {"preload_modules": ["ldtm_dagster"]}}
    assert deployment._forkserver_by_default({}) == {"multiprocess": {"start_method": forked}}
    assert deployment._forkserver_by_default({"multiprocess": {"max_concurrent": 3}}) == {
        "multiprocess": {"max_concurrent": 3, "start_method": forked}
    }
    spawn = {"multiprocess": {"start_method": {"spawn": {}}}}
    assert deployment._forkserver_by_default(spawn) == spawn
    assert deployment._forkserver_by_default({"in_process": {}}) == {"in_process": {}}


@pytest.mark.parametrize(
    ("var", "value", "message"),
    [
        ("LDTM_DEPLOYMENT", "kubernetes", "LDTM_DEPLOYMENT='kubernetes' is not one of local, docker, k8s"),
        ("LDTM_K8S_GPU_PER_STEP", "maybe", "LDTM_K8S_GPU_PER_STEP='maybe' is not a boolean"),
    ],
)
def test_bad_settings_are_refused_by_name(monkeypatch, var, value, message):
    monkeypatch.setenv("LDTM_DEPLOYMENT", "k8s")
    monkeypatch.setenv(var, value)
    with pytest.raises(LDTMError, match=message):  # the flag: config.setting_flag's ConfigError
        deployment.gpu_step_tags()


def test_k8s_without_a_pool_limit_names_the_fix():
    with pytest.raises(InputError, match="dagster instance concurrency set gpu N"):
        deployment.cluster_plan(None)


def test_on_k8s_the_pool_limit_is_the_instances_and_nvml_does_not_overwrite_it(
    dagster_instance, fake_nvml, monkeypatch
):
    fake_nvml["module"] = FakeNVML([("RTX", 24576, 8192)])  # this pod's NVML: 11 slots on one card
    monkeypatch.setattr(gpu_slots, "cpu_count", lambda: 16)  # and a GPU host's cores
    dagster_instance.event_log_storage.set_concurrency_slots(GPU_POOL, 3)  # the cluster's 3 GPUs
    context = build_op_context(instance=dagster_instance)
    monkeypatch.setenv("LDTM_DEPLOYMENT", "k8s")

    tick = gpu_pool_sensor(build_sensor_context(instance=dagster_instance, resources={"gpu": FakeGpuProbe()}))
    assert "k8s" in tick.skip_message and pool_limit(dagster_instance) == 3
    # A retrain plans on 3 slots, each chunk a pod that sees its own GPU as cuda:0, although the
    # planning pod has no GPU (nor, here, does this machine's torch); the limit stays.
    plan = chunk_slot_plan(context, FakeGpuProbe())
    assert plan_chunk_slots(context, plan, None) == (3, ["cuda:0"] * 3)
    assert plan_chunk_slots(context, plan, 2) == (2, ["cuda:0"] * 2)  # LDTM_MAX_WORKERS still caps
    assert pool_limit(dagster_instance) == 3

    # On one host the same run sets the limit from NVML, as before.
    monkeypatch.setenv("LDTM_DEPLOYMENT", "local")
    plan = chunk_slot_plan(context, FakeGpuProbe())
    assert plan_chunk_slots(context, plan, None)[0] == 11
    assert pool_limit(dagster_instance) == 11


def test_the_signer_alone_gets_the_receipt_key_and_the_receipts_volume():
    """Issue 61: the chart had no receipts at all. The signer is its own Deployment (one replica, never two
    at once), the only pod naming the Secret with the key and the receipts claim; it runs unprivileged, reads
    as the read-only role, and the code server and the runs get neither."""
    docs = list(yaml.safe_load_all((REPO / "deploy/k8s/signer.yaml").read_text()))
    claim, signer = (next(d for d in docs if d["kind"] == k) for k in ("PersistentVolumeClaim", "Deployment"))
    spec = signer["spec"]
    pod = spec["template"]["spec"]
    (container,) = pod["containers"]
    assert spec["replicas"] == 1 and spec["strategy"]["type"] == "Recreate"
    assert container["command"] == ["ldtm", "receipts", "watch", "--every", "30"]
    assert [s["secretRef"]["name"] for s in container["envFrom"]] == ["ldtm-signer"]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["LDTM_RECEIPTS_DIR"] == "/opt/ldtm/receipts"
    assert {
        v["persistentVolumeClaim"]["claimName"] for v in pod["volumes"] if "persistentVolumeClaim" in v
    } == {claim["metadata"]["name"]}
    assert pod["securityContext"]["runAsNonRoot"] and pod["automountServiceAccountToken"] is False
    assert container["securityContext"]["readOnlyRootFilesystem"]
    assert "ldtm_reader" in (REPO / "deploy/k8s/signer.yaml").read_text()
    values = (REPO / "deploy/k8s/values.yaml").read_text()
    assert "ldtm-signer" not in values and "ldtm-receipts" not in values and "RECEIPT" not in values
