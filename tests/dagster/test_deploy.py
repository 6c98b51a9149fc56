"""Deployment files: the compose file parses and everything it names exists; the instance configs
are valid Dagster config; scripts/dagster_home.sh switches SQLite <-> PostgreSQL by environment.
The stack itself runs in `make deploy-test` (deploy/test/deploy_test.py, not collected here)."""

import importlib.util
import os
import re
import shutil
import subprocess

import pytest
import yaml
from dagster._core.instance.config import dagster_instance_config
from ldtm_dagster_helpers import REPO

COMPOSE = yaml.safe_load((REPO / "docker-compose.yml").read_text())
SERVICES = COMPOSE["services"]
GPU_COMPOSE = yaml.safe_load((REPO / "docker-compose.gpu.yml").read_text())
DOCKER_YAML = yaml.safe_load((REPO / "deploy/docker/dagster.yaml").read_text())
GPU_YAML = yaml.safe_load((REPO / "deploy/docker/dagster.gpu.yaml").read_text())
ENV_EXAMPLE = {
    line.split("=", 1)[0]
    for line in (REPO / "deploy/docker/env.example").read_text().splitlines()
    if "=" in line and not line.startswith("#")
}


def _dockerfile(service: dict):
    return REPO / service["build"]["context"] / service["build"]["dockerfile"]


def test_compose_has_the_deploy_docker_layout():
    assert {
        "ldtm_postgres",
        "ldtm_user_code",
        "ldtm_webserver",
        "ldtm_daemon",
        "ldtm_dashboard",
        "ldtm_proxy",
        "ldtm_docker_proxy",
        "ldtm_migrate",
        "ldtm_signer",
    } == set(SERVICES)
    assert "healthcheck" in SERVICES["ldtm_postgres"]
    dashboard = SERVICES["ldtm_dashboard"]
    assert dashboard["command"][:2] == ["ldtm", "dashboard"]  # Streamlit flags after it
    port = dashboard["command"][dashboard["command"].index("--server.port") + 1]
    # Published only through the proxy, on the same port number.
    assert "ports" not in dashboard and dashboard["expose"] == [port]
    assert (
        f"${{LDTM_BIND_ADDRESS:-127.0.0.1}}:${{LDTM_DASHBOARD_PORT:-{port}}}:{port}"
        in (SERVICES["ldtm_proxy"]["ports"])
    )
    assert dashboard["image"] == SERVICES["ldtm_user_code"]["image"]
    assert dashboard["depends_on"]["ldtm_postgres"]["condition"] == "service_healthy"
    # One role per use of the app database: the owner migrates, the app writes, the dashboard reads.
    urls = {
        name: s["environment"].get("LDTM_DATABASE_URL")
        for name, s in SERVICES.items()
        if s.get("environment")
    }
    role = {
        name: re.match(r"postgresql\+psycopg2://(\w+):", url).group(1) for name, url in urls.items() if url
    }
    assert role == {
        "ldtm_migrate": "ldtm_owner",
        "ldtm_user_code": "ldtm_app",
        "ldtm_daemon": "ldtm_app",
        "ldtm_dashboard": "ldtm_reader",
        "ldtm_signer": "ldtm_reader",  # it signs what it reads; it writes no row
    }
    assert all(url.endswith("@ldtm_postgres:5432/ldtm") for url in urls.values() if url)
    # The owner migrates and grants before anything that uses the database starts.
    migrate = (REPO / "deploy/docker/migrate.sh").read_text()
    assert SERVICES["ldtm_migrate"]["entrypoint"] == ["/bin/sh", "/opt/ldtm/migrate.sh"]
    assert "./deploy/docker/migrate.sh:/opt/ldtm/migrate.sh:ro" in SERVICES["ldtm_migrate"]["volumes"]
    assert "sh -c 'ldtm db upgrade && ldtm db grant --app ldtm_app --reader ldtm_reader'" in migrate
    for name in ("ldtm_user_code", "ldtm_dashboard"):
        assert SERVICES[name]["depends_on"]["ldtm_migrate"]["condition"] == "service_completed_successfully"
    # Only the daemon launches runs; the webserver's "Terminate" goes through the socket proxy.
    with_socket = {
        name
        for name, service in SERVICES.items()
        if "/var/run/docker.sock:/var/run/docker.sock" in service.get("volumes", [])
    }
    assert with_socket == {"ldtm_daemon", "ldtm_docker_proxy"}
    assert SERVICES["ldtm_webserver"]["environment"]["DOCKER_HOST"] == "tcp://ldtm_docker_proxy:2375"
    for name in ("ldtm_webserver", "ldtm_daemon"):
        assert SERVICES[name]["depends_on"]["ldtm_postgres"]["condition"] == "service_healthy"


def test_every_image_is_built_here_or_is_the_postgres_image():
    built = {s["image"]: _dockerfile(s) for s in SERVICES.values() if "build" in s}
    for name, service in SERVICES.items():
        if "build" in service:
            assert _dockerfile(service).is_file(), name
        elif service["image"] not in built:
            # Public defaults, replaceable by local stand-ins (build_postgres_image.sh, build_proxy_image.sh).
            assert re.fullmatch(
                r"\$\{LDTM_POSTGRES_IMAGE:-postgres:\d+\}|\$\{LDTM_PROXY_IMAGE:-nginx:[\d.]+\}",
                service["image"],
            ), f"{name} uses an image nobody builds"
    assert (
        SERVICES["ldtm_user_code"]["environment"]["DAGSTER_CURRENT_IMAGE"]
        == SERVICES["ldtm_user_code"]["image"]
    )


def test_every_file_a_dockerfile_copies_exists():
    for service in SERVICES.values():
        if "build" not in service:
            continue
        text = _dockerfile(service).read_text()
        args = dict(re.findall(r"^ARG (\w+)=(\S+)$", text, re.M)) | service["build"].get("args", {})
        for line in text.splitlines():
            if line.startswith("COPY ") and "--from=" not in line:
                for src in line.split()[1:-1]:
                    src = re.sub(r"\$\{(\w+)\}", lambda m, a=args: a[m[1]], src)
                    src = re.sub(r"\$\{\w+:-([^}]*)\}", r"\1", src)  # a compose variable's default
                    assert (REPO / src).exists(), f"{_dockerfile(service).name}: COPY {src} missing"


def test_images_build_from_public_bases_by_default_and_offline_by_argument():
    for service in ("ldtm_user_code", "ldtm_webserver"):
        build = SERVICES[service]["build"]
        text = (REPO / build["dockerfile"]).read_text()
        assert "ARG BASE_IMAGE=python:3.11-slim" in text and build["args"]["BASE_IMAGE"].endswith(
            ":-python:3.11-slim}"
        )
        # Multi-stage: the wheels stay in the builder, the final image gets the venv only.
        final = text.rsplit("\nFROM ", 1)[1]
        assert "/wheels" not in final and "COPY --from=builder /opt/venv /opt/venv" in final
    user_code = (REPO / "deploy/Dockerfile.user_code").read_text()
    assert "ARG TORCH_INDEX=https://download.pytorch.org/whl/cpu" in user_code
    assert "ARG TORCH_SPEC=torch==2.13.0" in user_code
    gpu_args = GPU_COMPOSE["services"]["ldtm_user_code"]["build"]["args"]
    assert "whl/cu" in gpu_args["TORCH_INDEX"]


def test_commands_name_modules_and_files_that_exist():
    user_code = SERVICES["ldtm_user_code"]["command"]
    module = user_code[user_code.index("-m") + 1]
    assert importlib.util.find_spec(module) is not None
    web = SERVICES["ldtm_webserver"]["entrypoint"]
    assert web[0] == "dagster-webserver" and web[web.index("-w") + 1] == "workspace.yaml"
    # The webserver image's workdir holds deploy/docker/workspace.yaml, pointing at the gRPC service.
    workspace = yaml.safe_load((REPO / "deploy/docker/workspace.yaml").read_text())
    grpc = workspace["load_from"][0]["grpc_server"]
    assert grpc["host"] == "ldtm_user_code" and str(grpc["port"]) == user_code[user_code.index("-p") + 1]
    assert SERVICES["ldtm_daemon"]["entrypoint"] == ["dagster-daemon", "run"]


def test_volumes_and_networks_are_declared_or_exist():
    for name, service in SERVICES.items():
        for vol in service.get("volumes", []):
            src = vol.split(":")[0]
            if src.startswith(("./", "/")):
                if src != "/var/run/docker.sock":
                    assert (REPO / src).exists(), f"{name}: {src}"
            else:
                assert src in COMPOSE["volumes"], f"{name}: volume {src} undeclared"
        for net in service.get("networks", []):
            assert net in COMPOSE["networks"]
    for instance in (DOCKER_YAML, GPU_YAML):
        launcher = instance["run_launcher"]["config"]
        assert launcher["network"] == COMPOSE["networks"]["ldtm_network"]["name"]
        for vol in launcher["container_kwargs"]["volumes"]:
            assert vol.split(":")[0] in {v["name"] for v in COMPOSE["volumes"].values() if v and "name" in v}


def test_step_outputs_live_on_the_volume_every_run_container_mounts():
    # A re-execution starts a new container that loads its parent's step outputs from here.
    base = DOCKER_YAML["local_artifact_storage"]["config"]["base_dir"]
    mount = "ldtm_artifacts:/opt/ldtm/artifacts"
    assert mount in DOCKER_YAML["run_launcher"]["config"]["container_kwargs"]["volumes"]
    assert base.startswith(mount.split(":")[1] + "/")
    for name in ("ldtm_daemon", "ldtm_user_code"):
        assert mount in SERVICES[name]["volumes"], name
    assert f"{mount}:ro" in SERVICES["ldtm_webserver"]["volumes"]  # it shows the compute logs, writes nothing


def test_the_receipts_volume_is_the_signers_and_only_its():
    # .env (from env.example through new_env.sh) points the receipts at the volume and gets a random seed.
    example = dict(
        line.split("=", 1)
        for line in (REPO / "deploy/docker/env.example").read_text().splitlines()
        if line and not line.startswith("#")
    )
    mount = f"ldtm_receipts:{example['LDTM_RECEIPTS_DIR']}"
    assert example["LDTM_RECEIPT_KEY"] == ""  # new_env.sh fills every empty *_KEY= line
    # The signer writes receipts, ldtm_migrate hands the volume to ldtm; since issue 61 neither the code
    # server nor the runs (which write rows) mount it, nor hold the key.
    assert {n for n, s in SERVICES.items() if mount in s.get("volumes", [])} == {
        "ldtm_signer",
        "ldtm_migrate",
    }
    for instance in (DOCKER_YAML, GPU_YAML):
        assert not [
            v for v in instance["run_launcher"]["config"]["container_kwargs"]["volumes"] if "receipts" in v
        ]
        assert not [v for v in instance["run_launcher"]["config"]["env_vars"] if "RECEIPT" in v]
    assert COMPOSE["volumes"]["ldtm_receipts"]["name"] == "ldtm_receipts"
    assert "/opt/ldtm/receipts" in (REPO / "deploy/docker/migrate.sh").read_text()


def test_gpus_are_requested_only_by_the_gpu_override():
    # A host without the NVIDIA runtime refuses to start a container that requests the nvidia driver.
    assert "device_requests" not in DOCKER_YAML["run_launcher"]["config"]["container_kwargs"]
    [gpu] = GPU_YAML["run_launcher"]["config"]["container_kwargs"]["device_requests"]
    assert gpu["driver"] == "nvidia" and gpu["capabilities"] == [["gpu"]]
    # Otherwise the two instances are the same.
    strip = {"device_requests": None}
    gpu_launcher = {k: v for k, v in GPU_YAML["run_launcher"]["config"].items()}
    gpu_launcher["container_kwargs"] = {
        k: v for k, v in gpu_launcher["container_kwargs"].items() if k not in strip
    }
    gpu_launcher["env_vars"] = [v for v in gpu_launcher["env_vars"] if not v.startswith("NVIDIA_")]
    assert {**GPU_YAML, "run_launcher": {**GPU_YAML["run_launcher"], "config": gpu_launcher}} == DOCKER_YAML
    # The override mounts the GPU instance where the webserver and daemon read theirs.
    services = GPU_COMPOSE["services"]
    for name in ("ldtm_webserver", "ldtm_daemon"):
        assert (
            "./deploy/docker/dagster.gpu.yaml:/opt/dagster/dagster_home/dagster.yaml:ro"
            in services[name]["volumes"]
        )
    assert (REPO / "deploy/docker/dagster.gpu.yaml").is_file()
    [device] = services["ldtm_user_code"]["deploy"]["resources"]["reservations"]["devices"]
    assert device["driver"] == "nvidia"


def test_runs_are_monitored_and_retried_on_crashes_only():
    monitoring = DOCKER_YAML["run_monitoring"]
    assert monitoring["enabled"] and monitoring["start_timeout_seconds"] > 0
    assert monitoring["max_runtime_seconds"] > 0 and monitoring["max_resume_run_attempts"] == 0
    assert DOCKER_YAML["run_retries"] == {
        "enabled": True,
        "max_retries": 1,
        "retry_on_asset_or_op_failure": False,
    }


def test_every_variable_is_provided_and_no_credentials_are_written_down():
    text = (REPO / "docker-compose.yml").read_text()
    for var, default in re.findall(r"(?<!\$)\$\{(\w+)(:?[-?][^}]*)?\}", text):
        assert var in ENV_EXAMPLE or default.startswith((":-", "-")), (
            f"${{{var}}} has no default and no example"
        )
    env = SERVICES["ldtm_user_code"]["environment"]
    assert str(env["DAGSTER_PG_PASSWORD"]).startswith("${")
    # Everything the instance config and run launcher read is in the services' environment.
    docker_yaml = (REPO / "deploy/docker/dagster.yaml").read_text()
    needed = set(re.findall(r"\{env: (\w+)\}", docker_yaml))
    needed |= {
        v.split("=")[0]
        for v in yaml.safe_load(docker_yaml)["run_launcher"]["config"]["env_vars"]
        if "=" not in v
    }
    # The daemon launches the runs; the code server evaluates sensors in the same instance.
    for name in ("ldtm_user_code", "ldtm_daemon"):
        assert needed <= set(SERVICES[name]["environment"]), name
    instance_only = set(re.findall(r"\{env: (\w+)\}", docker_yaml))
    assert instance_only <= set(SERVICES["ldtm_webserver"]["environment"])
    assert ".env" in (REPO / ".gitignore").read_text().split()


@pytest.mark.parametrize(
    "path",
    [
        "dagster.yaml",
        "deploy/postgres/dagster.yaml",
        "deploy/docker/dagster.yaml",
        "deploy/docker/dagster.gpu.yaml",
    ],
)
def test_instance_configs_are_valid_dagster_config(path, tmp_path):
    shutil.copy(REPO / path, tmp_path / "dagster.yaml")
    config, _ = dagster_instance_config(str(tmp_path))
    assert config["concurrency"]["pools"]["granularity"] == "op"
    assert config["run_monitoring"]["free_slots_after_run_end_seconds"] > 0


def _home_script(tmp_path, **env):
    full = {k: v for k, v in os.environ.items() if not k.startswith(("DAGSTER_PG_", "LDTM_DAGSTER"))}
    full.update(DAGSTER_HOME=str(tmp_path / "home"), **env)
    return subprocess.run([str(REPO / "scripts/dagster_home.sh")], env=full, capture_output=True, text=True)


def test_dagster_home_script_switches_storage_by_environment(tmp_path):
    assert _home_script(tmp_path).returncode == 0
    assert (tmp_path / "home/dagster.yaml").read_text() == (REPO / "dagster.yaml").read_text()

    missing = _home_script(tmp_path, LDTM_DAGSTER_STORAGE="postgres")
    assert missing.returncode == 2 and "DAGSTER_PG_USERNAME" in missing.stderr

    pg = {
        "DAGSTER_PG_USERNAME": "u",
        "DAGSTER_PG_PASSWORD": "",
        "DAGSTER_PG_HOST": "h",
        "DAGSTER_PG_PORT": "5432",
        "DAGSTER_PG_DB": "d",
    }
    assert _home_script(tmp_path, LDTM_DAGSTER_STORAGE="postgres", **pg).returncode == 0
    assert (tmp_path / "home/dagster.yaml").read_text() == (REPO / "deploy/postgres/dagster.yaml").read_text()
    assert _home_script(tmp_path, LDTM_DAGSTER_STORAGE="mysql").returncode == 2
