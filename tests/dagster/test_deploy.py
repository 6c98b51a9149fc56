"""Deployment files: the compose file parses and everything it names exists; the instance configs
are valid Dagster config; scripts/dagster_home.sh switches SQLite <-> PostgreSQL by environment."""

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
ENV_EXAMPLE = {
    line.split("=", 1)[0]
    for line in (REPO / "deploy/docker/env.example").read_text().splitlines()
    if "=" in line and not line.startswith("#")
}


def _dockerfile(service: dict):
    return REPO / service["build"]["context"] / service["build"]["dockerfile"]


def test_compose_has_the_deploy_docker_layout():
    assert {"ldtm_postgres", "ldtm_user_code", "ldtm_webserver", "ldtm_daemon", "ldtm_dashboard"} == set(
        SERVICES
    )
    assert "healthcheck" in SERVICES["ldtm_postgres"]
    dashboard = SERVICES["ldtm_dashboard"]
    assert dashboard["command"][:2] == ["ldtm", "dashboard"]  # Streamlit flags after it
    port = dashboard["command"][dashboard["command"].index("--server.port") + 1]
    assert (
        dashboard["ports"] == [f"{port}:{port}"] and dashboard["image"] == SERVICES["ldtm_user_code"]["image"]
    )
    assert dashboard["depends_on"]["ldtm_postgres"]["condition"] == "service_healthy"
    assert (
        dashboard["environment"]["LDTM_DATABASE_URL"]
        == SERVICES["ldtm_user_code"]["environment"]["LDTM_DATABASE_URL"]
    )
    for name in ("ldtm_webserver", "ldtm_daemon"):
        assert "/var/run/docker.sock:/var/run/docker.sock" in SERVICES[name]["volumes"]
        assert SERVICES[name]["depends_on"]["ldtm_postgres"]["condition"] == "service_healthy"


def test_every_image_is_built_here_or_is_the_postgres_image():
    built = {s["image"]: _dockerfile(s) for s in SERVICES.values() if "build" in s}
    for name, service in SERVICES.items():
        if "build" in service:
            assert _dockerfile(service).is_file(), name
        elif service["image"] not in built:
            assert service["image"].startswith("postgres:"), f"{name} uses an image nobody builds"
    assert (
        SERVICES["ldtm_user_code"]["environment"]["DAGSTER_CURRENT_IMAGE"]
        == SERVICES["ldtm_user_code"]["image"]
    )


def test_every_file_a_dockerfile_copies_exists():
    for service in SERVICES.values():
        if "build" not in service:
            continue
        for line in _dockerfile(service).read_text().splitlines():
            if line.startswith("COPY "):
                for src in line.split()[1:-1]:
                    assert (REPO / src).exists(), f"{_dockerfile(service).name}: COPY {src} missing"


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
    launcher = yaml.safe_load((REPO / "deploy/docker/dagster.yaml").read_text())["run_launcher"]["config"]
    assert launcher["network"] == COMPOSE["networks"]["ldtm_network"]["name"]
    for vol in launcher["container_kwargs"]["volumes"]:
        assert vol.split(":")[0] == COMPOSE["volumes"]["ldtm_artifacts"]["name"]
    [gpu] = launcher["container_kwargs"]["device_requests"]
    assert gpu["driver"] == "nvidia" and gpu["capabilities"] == [["gpu"]]


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
    needed |= set(yaml.safe_load(docker_yaml)["run_launcher"]["config"]["env_vars"])
    for name in ("ldtm_user_code", "ldtm_webserver", "ldtm_daemon"):
        assert needed <= set(SERVICES[name]["environment"]), name
    assert ".env" in (REPO / ".gitignore").read_text().split()


@pytest.mark.parametrize(
    "path", ["dagster.yaml", "deploy/postgres/dagster.yaml", "deploy/docker/dagster.yaml"]
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
