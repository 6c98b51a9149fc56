"""Issue 38, secure by default, as far as the files decide it (make deploy-test checks the running stack):
each secret reaches only the services that need it, every LDTM_* setting reaches every service that reads
it (one list, generated from config.SETTINGS), every long-running service restarts, the proxy asks every
request but its own health for a password, the Docker socket proxy passes only what "Terminate" needs,
and a placeholder password is refused before anything serves."""

import json
import os
import re
import socket
import stat
import subprocess
import sys
import time

import pytest
import yaml
from ldtm_dagster_helpers import REPO

from ldtm_core import config
from ldtm_core.accountability.ledger import receipts
from ldtm_core.errors import ConfigError

COMPOSE = yaml.safe_load((REPO / "docker-compose.yml").read_text())
SERVICES = COMPOSE["services"]
RUNS = yaml.safe_load((REPO / "deploy/docker/dagster.yaml").read_text())["run_launcher"]["config"]["env_vars"]
USER_SETTINGS = [
    name
    for name, row in config.SETTINGS.items()
    if not row.internal and name not in ("LDTM_GPU_POOL_ID",)  # the code location sets that one
]
SECRETS = {
    "LDTM_AUDIT_KEY",
    "LDTM_RECEIPT_KEY",
    "LDTM_NOTIFY_WEBHOOK_URL",
    "LDTM_HEARTBEAT_URL",
    "LDTM_UI_PASSWORD",
    "LDTM_DASHBOARD_PASSWORD",
    "LDTM_PG_ADMIN_PASSWORD",
    "DAGSTER_PG_PASSWORD",
    "LDTM_PG_OWNER_PASSWORD",
    "LDTM_PG_APP_PASSWORD",
    "LDTM_PG_READER_PASSWORD",
}


def env(service: str) -> dict:
    return SERVICES[service].get("environment") or {}


def test_the_settings_lists_are_generated_from_the_settings_table():
    out = subprocess.run(
        [sys.executable, "deploy/scripts/sync_settings.py", "--check"],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.parametrize("service", ["ldtm_user_code", "ldtm_daemon"])
def test_every_setting_reaches_the_code_server_the_daemon_and_the_runs(service):
    # Before: 11 of them, and LDTM_GATE_MAX_P_VALUE, LDTM_SHADOW_SESSIONS, LDTM_SNAPSHOT_DEADLINE in .env
    # were silently ignored. The receipts' settings are the signer's alone (issue 61).
    for name in USER_SETTINGS:
        if name in config.SIGNER_SETTINGS:
            assert name not in env(service) and name not in RUNS and name in env("ldtm_signer"), name
            continue
        assert name in env(service), (service, name)
        if name not in ("LDTM_HOME", "LDTM_DATABASE_URL", "LDTM_DEPLOYMENT"):
            assert env(service)[name] == f"${{{name}:-}}", (service, name)  # from .env, else the default
    for name in USER_SETTINGS:
        if name != "LDTM_DEPLOYMENT" and name not in config.SIGNER_SETTINGS:
            assert name in RUNS, name


def _reads(service: str) -> set:
    """The variables of .env a service receives: by name, or inside a value (a database URL)."""
    refs = set()
    for key, value in env(service).items():
        refs.add(key)
        refs |= set(re.findall(r"\$\{(\w+)", str(value)))
    return refs


def test_secrets_reach_only_the_services_that_need_them():
    holders = {name: {s for s in SERVICES if name in _reads(s)} for name in SECRETS}
    app_and_runs = {"ldtm_user_code", "ldtm_daemon"}  # the daemon copies them into each run container
    assert holders["LDTM_AUDIT_KEY"] == holders["LDTM_NOTIFY_WEBHOOK_URL"] == app_and_runs
    assert holders["LDTM_RECEIPT_KEY"] == {"ldtm_signer"}  # issue 61: the signer alone
    assert holders["LDTM_HEARTBEAT_URL"] == app_and_runs
    assert holders["LDTM_UI_PASSWORD"] == holders["LDTM_DASHBOARD_PASSWORD"] == {"ldtm_proxy"}
    # Each database password: PostgreSQL (which makes the roles) and the services of that role.
    assert holders["LDTM_PG_ADMIN_PASSWORD"] == {"ldtm_postgres"}
    assert holders["DAGSTER_PG_PASSWORD"] == {"ldtm_postgres", "ldtm_webserver", *app_and_runs}
    assert holders["LDTM_PG_OWNER_PASSWORD"] == {"ldtm_postgres", "ldtm_migrate"}
    assert holders["LDTM_PG_APP_PASSWORD"] == {"ldtm_postgres", *app_and_runs}
    assert holders["LDTM_PG_READER_PASSWORD"] == {"ldtm_postgres", "ldtm_dashboard", "ldtm_signer"}
    assert not [n for n in env("ldtm_webserver") if n.startswith("LDTM_")]
    assert not [n for n in env("ldtm_dashboard") if n.startswith("DAGSTER_")]
    assert {"LDTM_AUDIT_KEY", "LDTM_NOTIFY_WEBHOOK_URL", "LDTM_DATABASE_URL"} <= set(RUNS)
    assert not {n for n in RUNS if n.startswith(("LDTM_RECEIPT", "LDTM_TSA"))}  # runs never sign


def test_every_long_running_service_restarts_after_a_crash_or_an_engine_restart():
    # Before: after a Docker engine restart only the code server came back; the nightly and the alert
    # sensors stopped without a word.
    for name, service in SERVICES.items():
        if name != "ldtm_migrate":  # one-shot, at every `up`
            assert service.get("restart") == "unless-stopped", name


def test_the_proxy_asks_for_a_password_on_both_ports_and_runs_unprivileged():
    text = (REPO / "deploy/proxy/nginx.conf").read_text()
    http = text.split("http {", 1)[1]
    assert re.search(r"^    auth_basic \"LDTM\";$", http, re.M)  # http level: every server inherits it
    assert (
        http.count("auth_basic off;") == 1
        and "location = /_proxy/health {\n            auth_basic off;" in http
    )
    assert {"listen 3000;", "listen 8501;"} <= {line.strip() for line in http.splitlines()}
    assert "\nuser " not in text  # no privileged workers
    proxy = SERVICES["ldtm_proxy"]
    assert proxy["user"] == "65534:65534"
    assert proxy["environment"]["LDTM_UI_PASSWORD"].startswith("${LDTM_UI_PASSWORD:?")
    assert proxy["environment"]["LDTM_DASHBOARD_PASSWORD"].startswith("${LDTM_DASHBOARD_PASSWORD:?")
    # Issue 61: one password opened both; now the UI (operators) and the dashboard (readers) each its own.
    ui, dashboard = http.split("listen 3000;", 1)[1].split("listen 8501;", 1)
    assert "auth_basic_user_file /tmp/ldtm_ui.htpasswd;" in ui and "ldtm_dashboard.htpasswd" not in ui
    assert (
        "auth_basic_user_file /tmp/ldtm_dashboard.htpasswd;" in dashboard
        and "ldtm_ui.htpasswd" not in dashboard
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


RUN_ID, OTHER_ID = "a" * 64, "b" * 64  # a run container of this deployment; PostgreSQL's


@pytest.fixture
def socket_proxy(tmp_path):
    """deploy/proxy/docker_socket_proxy.py in front of a fake Docker socket that answers inspect for two
    containers (a labelled run holding a secret in its environment, and another) and records each call."""
    import http.server
    import socketserver
    import threading

    calls = []
    containers = {
        RUN_ID: {"Id": RUN_ID, "State": {"Status": "running"}, "Mounts": [{"Source": "/var/lib/x"}],
                 "Config": {"Labels": {"dagster/run_id": "r1", "ldtm.run": "true"}, "Env": ["LDTM_AUDIT_KEY=topsecret"],
                            "Image": "ldtm_user_code_image"}},
        OTHER_ID: {"Id": OTHER_ID, "State": {"Status": "running"},
                   "Config": {"Labels": {"com.docker.compose.service": "ldtm_postgres"}, "Env": ["POSTGRES_PASSWORD=pw"]}},
    }  # fmt: skip

    class Docker(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _answer(self, status, payload):
            body = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):  # noqa: N802
            calls.append(("GET", self.path))
            cid = self.path.split("/containers/")[-1].split("/")[0]
            if self.path.endswith("/version"):
                return self._answer(200, {"ApiVersion": "1.47"})
            return self._answer(200, containers[cid]) if cid in containers else self._answer(404, {})

        def do_POST(self):  # noqa: N802
            calls.append(("POST", self.path))
            self._answer(204, {})

        def address_string(self):
            return "docker"

        def log_message(self, *args):
            pass

    class UnixServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
        daemon_threads = True

    sock = tmp_path / "docker.sock"
    fake = UnixServer(str(sock), Docker)
    threading.Thread(target=fake.serve_forever, daemon=True).start()
    port = free_port()
    env = {**os.environ, "DOCKER_SOCKET": str(sock), "PROXY_PORT": str(port)}
    log = (tmp_path / "proxy.log").open("w")
    proc = subprocess.Popen([sys.executable, str(REPO / "deploy/proxy/docker_socket_proxy.py")], env=env,
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
    try:
        for _ in range(200):
            assert proc.poll() is None, (tmp_path / "proxy.log").read_text()
            try:
                socket.create_connection(("127.0.0.1", port), 0.2).close()
                break
            except OSError:
                time.sleep(0.05)
        yield port, calls
    finally:
        proc.kill()  # SIGKILL: a SIGTERM a parent ignores stays ignored in the child
        proc.wait(30)
        log.close()
        fake.shutdown()
        fake.server_close()


def _ask(port: int, method: str, path: str) -> tuple[int, bytes]:
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request(method, path, body=b"" if method == "POST" else None)
    answer = conn.getresponse()
    return answer.status, answer.read()


@pytest.mark.parametrize(
    ("method", "path", "allowed"),
    [
        ("GET", "/version", True),
        ("GET", "/v1.47/containers/" + RUN_ID + "/json", True),
        ("POST", "/v1.47/containers/" + RUN_ID + "/stop?t=10", True),
        ("GET", "/v1.47/containers/" + OTHER_ID + "/json", False),  # PostgreSQL's, by its id (issue 61)
        ("POST", "/v1.47/containers/" + OTHER_ID + "/stop", False),
        ("GET", "/v1.47/containers/json", False),  # listing (to find the database's container)
        ("GET", "/v1.47/containers/ldtm_postgres/json", False),  # by name
        ("POST", "/v1.47/containers/create", False),
        ("POST", "/v1.47/containers/" + RUN_ID + "/exec", False),
        ("POST", "/v1.47/containers/" + RUN_ID + "/kill", False),
        ("DELETE", "/v1.47/containers/" + RUN_ID, False),
        ("GET", "/v1.47/images/json", False),
        ("POST", "/v1.47/containers/" + RUN_ID + "/json", False),  # the right path, the wrong method
    ],
)
def test_the_docker_socket_proxy_passes_only_what_terminate_needs(socket_proxy, method, path, allowed):
    port, calls = socket_proxy
    status, body = _ask(port, method, path)
    assert (status < 400) == allowed, (status, body)
    # Only a run container is ever stopped, and no inspect answer carries an environment or host paths.
    assert all(RUN_ID in p for m, p in calls if m == "POST")
    assert b"topsecret" not in body and b"POSTGRES_PASSWORD" not in body and b"/var/lib/x" not in body
    if allowed and path.endswith("/json"):
        assert json.loads(body)["Config"]["Labels"]["dagster/run_id"] == "r1"


def test_a_placeholder_password_is_refused_before_anything_serves(monkeypatch):
    monkeypatch.setenv("DAGSTER_PG_PASSWORD", "change-me")
    with pytest.raises(ConfigError, match="DAGSTER_PG_PASSWORD: it is a template's or default placeholder"):
        config.check_environment()
    monkeypatch.setenv("DAGSTER_PG_PASSWORD", "a-real-one-3f9c-7Tq2")
    monkeypatch.setenv("LDTM_DATABASE_URL", "postgresql+psycopg2://ldtm:change-me@db:5432/ldtm")
    with pytest.raises(
        ConfigError, match="LDTM_DATABASE_URL: its password is a template's or default placeholder"
    ) as err:
        config.check_environment()
    assert "change-me" not in str(err.value).split(":", 1)[0]
    monkeypatch.setenv("LDTM_DATABASE_URL", "postgresql+psycopg2://ldtm:a-real-one-3f9c-7Tq2@db:5432/ldtm")
    config.check_environment()
    # The code location checks the settings when it loads: a bad one is a load error, not a failed run.
    monkeypatch.setenv("DAGSTER_PG_PASSWORD", "change-me")
    out = subprocess.run(
        [sys.executable, "-c", "import ldtm_dagster.definitions"],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={**os.environ, "LDTM_DATABASE_URL": ""},
    )
    assert (
        out.returncode != 0 and "DAGSTER_PG_PASSWORD: it is a template's or default placeholder" in out.stderr
    )


def test_the_template_holds_no_password_and_new_env_makes_one_for_each(tmp_path):
    example = (REPO / "deploy/docker/env.example").read_text()
    values = dict(
        line.split("=", 1) for line in example.splitlines() if "=" in line and not line.startswith("#")
    )
    assert {values[name] for name in SECRETS if name in values} == {""}
    assert SECRETS - {"LDTM_NOTIFY_WEBHOOK_URL", "LDTM_HEARTBEAT_URL"} <= set(values)
    assert "change-me" not in example
    target = tmp_path / ".env"
    out = subprocess.run(
        [str(REPO / "deploy/scripts/new_env.sh"), str(target)], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    made = dict(
        line.split("=", 1)
        for line in target.read_text().splitlines()
        if "=" in line and not line.startswith("#")
    )
    secrets = [
        made[k]
        for k in (
            "DAGSTER_PG_PASSWORD",
            "LDTM_UI_PASSWORD",
            "LDTM_DASHBOARD_PASSWORD",
            "LDTM_AUDIT_KEY",
            "LDTM_RECEIPT_KEY",
        )
    ]
    assert (
        all(len(s) >= 24 and re.fullmatch(r"[A-Za-z0-9_-]+", s) for s in secrets) and len(set(secrets)) == 5
    )
    # The receipt seed is long enough to be a signing key.
    assert receipts.key_from_seed(made["LDTM_RECEIPT_KEY"]).public_key()
    assert not any(s in out.stdout for s in secrets)  # never echoed
    # Never overwrites.
    target.write_text("DAGSTER_PG_PASSWORD=mine\n")
    again = subprocess.run(
        [str(REPO / "deploy/scripts/new_env.sh"), str(target)], capture_output=True, text=True
    )
    assert again.returncode == 1 and "left as it is" in again.stderr
    assert target.read_text() == "DAGSTER_PG_PASSWORD=mine\n"


def test_only_the_daemon_runs_as_root_and_the_migration_only_to_hand_over_the_volume():
    # Before: every process of the stack ran as root.
    for dockerfile in ("deploy/Dockerfile.user_code", "deploy/Dockerfile.dagster"):
        text = (REPO / dockerfile).read_text()
        last_user = re.findall(r"^USER (\S+)$", text, re.M)[-1]
        assert last_user == "ldtm" and "useradd --uid 10001" in text, dockerfile
    as_root = {name for name, service in SERVICES.items() if str(service.get("user")) in ("root", "0", "0:0")}
    # The daemon and the socket proxy hold the Docker socket (root's); the migration hands over a volume.
    assert as_root == {"ldtm_daemon", "ldtm_docker_proxy", "ldtm_migrate"}
    assert SERVICES["ldtm_proxy"]["user"] == "65534:65534"
    migrate = (REPO / "deploy/docker/migrate.sh").read_text()
    # Root hands the volume over, then the migrations run as ldtm.
    assert migrate.index("chown -R ldtm:ldtm") < migrate.index("setpriv --reuid=ldtm --regid=ldtm")


def test_artifacts_are_writable_only_where_runs_are_made_and_read_only_where_only_read():
    """Issue 61, finding 2: the dashboard and the webserver mounted the artifacts volume read-write; it holds
    the pickled step outputs later runs load. Now only the code server, the daemon, the migration (which
    hands the volume over) and the run containers may write it."""
    writers = set()
    for name, service in SERVICES.items():
        for volume in service.get("volumes", []):
            if volume.split(":")[0] == "ldtm_artifacts" and not volume.endswith(":ro"):
                writers.add(name)
    assert writers == {"ldtm_user_code", "ldtm_daemon", "ldtm_migrate"}
    for name in ("ldtm_webserver", "ldtm_dashboard"):
        assert "ldtm_artifacts:/opt/ldtm/artifacts:ro" in SERVICES[name]["volumes"], name
