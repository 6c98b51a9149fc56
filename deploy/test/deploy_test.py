"""`make deploy-test`: the compose stack on a real Docker engine, every run in its own container.

Starts dockerd when none answers (and stops it at the end), builds the images offline
(deploy/scripts/build_images.sh: debootstrap base, wheelhouse, PostgreSQL stand-in; the wheelhouse with
a host Python of another version than the image's where one is installed), then follows the recipe of
docs/operations.md, "A host with no image registry", as written: new_env.sh plus the documented `.env`
lines (and only the test's own ports, universe and profile), then the documented `up`. All seven
services must report healthy. Then, through the proxy and the webserver's GraphQL API:
  1. prices -> features, a checkpoints backfill, the promotion sensor's gate runs, one nightly evening
  2. rows in the compose PostgreSQL, checkpoints in the artifacts volume, the dashboard's leaderboard
  S. docs/operations.md's Security claims: 401 without the password, secrets only where needed, no
     Docker socket in the webserver and "Terminate" through the socket proxy, a run config reading a
     secret fails without showing it and is not retried
  3. docker kill of a run container mid-checkpoints: run monitoring fails the run, its `gpu` slots are
     freed, run_retries' automatic retry (ALL_STEPS) trains the remaining tickers only
  4. compose down + up: instance, app tables and artifacts survive; a second nightly works; each nightly
     wrote a signed receipt to the receipts volume, and the record exported from the compose store
     passes `ldtm verify-record` on this host, with no database (docs/operations.md's commands)
  5. deploy/scripts/backup.sh, `down -v` (every volume destroyed), deploy/scripts/restore.sh into a fresh
     PostgreSQL, `up`: every app table's rows, Dagster's runs, the checkpoint and receipt files are identical
  6. cleanup of containers, networks, volumes (images and wheelhouse stay as the cache)
Every wait is bounded; on a timeout or failure it prints every container's state and log tails.
Not collected by pytest (it takes minutes): run by the venv python from the repository root.
"""

from __future__ import annotations

import base64
import datetime as dt
import glob
import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import yaml
from dagster_graphql import DagsterGraphQLClient

from ldtm_core.data import calendar
from ldtm_core.data.universe import load_universe
from ldtm_dagster.sensors import NIGHTLY_RUN_TAG

REPO = Path(__file__).resolve().parents[2]
PROJECT = os.environ.get("LDTM_DEPLOY_PROJECT", "ldtm_deploy_test")
CACHE = Path(os.environ.get("LDTM_DEPLOY_CACHE", "/var/cache/ldtm-deploy"))
LOCATION, REPOSITORY = "ldtm", "__repository__"
# The long-running services, as the compose file names them (ldtm_migrate runs once at each `up`).
SERVICES = [
    name
    for name, service in yaml.safe_load((REPO / "docker-compose.yml").read_text())["services"].items()
    if service.get("restart") != "no"
]
NETWORK, ARTIFACTS, RECEIPTS = "ldtm_network", "ldtm_artifacts", "ldtm_receipts"
SUBMISSIONS = "ldtm_submissions"
TICKERS = load_universe("demo")
# Tickers that got a model from the backfill: the demo universe's late listing (FER) may have too few
# sessions before AS_OF to train; set by step_1_2 from the database, used by every later check.
TRAINED: list[str] = []
START, AS_OF = dt.date(2023, 1, 3), dt.date(2024, 11, 29)
EVENING_1 = calendar.sessions_after(AS_OF, 1)
EVENING_2 = calendar.sessions_after(EVENING_1, 1)
RANGE = {"dagster/asset_partition_range_start": TICKERS[0], "dagster/asset_partition_range_end": TICKERS[-1]}
GPU_TAGS = {"ldtm/gpu": "true"}
RUN_TIMEOUT = 900  # one run, container start included, on a 2-core box shared with other work
T0 = time.time()


def basic_auth(user: str, password: str) -> dict:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


def status_of(url: str, headers: dict | None = None, data: bytes | None = None) -> int:
    """The HTTP status of one request (an error status is an answer here, not a failure)."""
    try:
        with urllib.request.urlopen(
            urllib.request.Request(url, data=data, headers=headers or {}), timeout=10
        ) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def log(msg: str) -> None:
    print(f"[deploy-test {time.time() - T0:6.0f}s] {msg}", flush=True)


class DeployTestFailure(Exception):
    pass


def sh(
    cmd: list[str] | str,
    *,
    check: bool = True,
    timeout: float = 120,
    quiet: bool = False,
    stdin: str | None = None,
) -> str:
    """Run a command, return stdout; on failure raise with its output."""
    args = cmd if isinstance(cmd, list) else shlex.split(cmd)
    try:
        p = subprocess.run(args, capture_output=True, text=True, timeout=timeout, cwd=REPO, input=stdin)
    except subprocess.TimeoutExpired as e:
        raise DeployTestFailure(f"timed out after {timeout}s: {shlex.join(args)}") from e
    if check and p.returncode != 0:
        raise DeployTestFailure(
            f"exit {p.returncode}: {shlex.join(args)}\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
        )
    if not quiet and p.returncode != 0:
        log(f"(exit {p.returncode}) {shlex.join(args)}: {p.stderr.strip()[-500:]}")
    return p.stdout


def compose_cmd() -> list[str]:
    out = sh(["bash", "-c", "source deploy/scripts/lib.sh && compose_cmd"]).strip()
    return out.split()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --- the documented recipe and the build's host Python ---------------------------------------------------

OFFLINE_SECTION = "### A host with no image registry"


def documented_offline_recipe() -> tuple[list[str], list[str]]:
    """The `.env` lines and the `up` arguments of docs/operations.md's offline recipe, as written."""
    text = (REPO / "docs/operations.md").read_text()
    if OFFLINE_SECTION not in text:
        raise DeployTestFailure(f"docs/operations.md has no section {OFFLINE_SECTION!r}")
    section = text.split(OFFLINE_SECTION, 1)[1].split("\n## ", 1)[0].split("\n### ", 1)[0]
    block = section.split("```", 2)[1]
    lines = [line.split("  #", 1)[0].strip() for line in block.splitlines()]
    if "deploy/scripts/new_env.sh" not in lines:
        raise DeployTestFailure("the offline recipe does not make .env with deploy/scripts/new_env.sh")
    heredoc = re.search(r"^cat >> \.env <<'EOF'\n(.*?)^EOF$", block, re.S | re.M)
    if not heredoc:
        raise DeployTestFailure("the offline recipe has no `cat >> .env <<'EOF'` block")
    env_lines = heredoc.group(1).strip().splitlines()
    ups = [line.split() for line in lines if re.match(r"(docker compose|docker-compose) up\b", line)]
    if not ups:
        raise DeployTestFailure("the offline recipe has no `up` command")
    up_args = ups[0][ups[0].index("up") + 1 :]
    return env_lines, up_args


def other_python(image_version: tuple[int, int] = (3, 11)) -> str | None:
    """A host Python with pip of another version than the image's, to build the wheelhouse with (the
    wheels must be chosen for the image's Python, not the host's); None where there is none."""
    wanted = os.environ.get("LDTM_DEPLOY_WHEELHOUSE_PYTHON")
    candidates = [wanted] if wanted else []
    candidates += [shutil.which(f"python3.{minor}") for minor in (13, 12, 10)]
    candidates += sorted(
        glob.glob(os.path.expanduser("~/.pyenv/versions/3.1[0-9]*/bin/python3")), reverse=True
    )
    for exe in filter(None, candidates):
        p = subprocess.run(
            [exe, "-c", "import sys, pip; print(*sys.version_info[:2])"], capture_output=True, text=True
        )
        if p.returncode == 0 and tuple(map(int, p.stdout.split())) != image_version:
            return exe
    return None


# --- the engine ---------------------------------------------------------------------------------------


def engine_answers() -> bool:
    return subprocess.run(["docker", "info"], capture_output=True, timeout=30).returncode == 0


def start_engine() -> subprocess.Popen | None:
    if engine_answers():
        log("Docker engine already running")
        return None
    log("starting dockerd")
    CACHE.mkdir(parents=True, exist_ok=True)
    out = open(CACHE / "dockerd.log", "ab")  # noqa: SIM115 - lives as long as the engine
    proc = subprocess.Popen(["dockerd"], stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    wait("dockerd answers", 90, engine_answers)
    return proc


def stop_engine(proc: subprocess.Popen) -> None:
    log("stopping the dockerd this test started")
    proc.terminate()
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=30)


# --- diagnostics and waits -----------------------------------------------------------------------------


def run_containers(all_states: bool = True) -> list[str]:
    """Run containers DockerRunLauncher started on this stack's network."""
    args = ["docker", "ps", "-q", "--filter", "label=dagster/run_id", "--filter", f"network={NETWORK}"]
    return sh(args + (["-a"] if all_states else []), check=False).split()


def dump_state(failing: str | None = None) -> None:
    """Every container's state, and the log tail of the failing one (else of the stack's services)."""
    print("---- containers ----", flush=True)
    print(
        sh(
            ["docker", "ps", "-a", "--format", "{{.Names}}\t{{.Status}}\t{{.Image}}\t{{.Labels}}"],
            check=False,
        )
    )
    for name in [failing] if failing else ["ldtm_daemon", "ldtm_user_code", "ldtm_webserver"]:
        print(f"---- log tail: {name} ----", flush=True)
        p = subprocess.run(["docker", "logs", "--tail", "80", name], capture_output=True, text=True)
        print(p.stdout[-6000:], p.stderr[-6000:], flush=True)


def wait(what: str, seconds: float, probe, *, interval: float = 2.0, failing=None):
    """Poll probe() until it returns a truthy value; on timeout dump the containers and fail."""
    deadline = time.time() + seconds
    last_error = None
    while time.time() < deadline:
        try:
            value = probe()
            if value:
                return value
        except DeployTestFailure:
            raise
        except Exception as e:  # the webserver restarting, a connection refused: retried until the deadline
            last_error = e
        time.sleep(interval)
    dump_state(failing() if callable(failing) else failing)
    raise DeployTestFailure(f"timed out after {seconds:.0f}s waiting for {what} (last error: {last_error!r})")


# --- the stack -------------------------------------------------------------------------------------------


class Stack:
    def __init__(self, env_file: Path, web_port: int, dash_port: int):
        self.env_file, self.web_port, self.dash_port = env_file, web_port, dash_port
        self.compose = [*compose_cmd(), "--env-file", str(env_file), "-p", PROJECT]
        self.url = f"http://127.0.0.1:{web_port}/graphql"
        self.env = dict(
            line.split("=", 1)
            for line in env_file.read_text().splitlines()
            if "=" in line and not line.lstrip().startswith("#")
        )
        # Every request goes through ldtm_proxy, with the password of .env.
        self.auth = basic_auth(self.env["LDTM_UI_USER"], self.env["LDTM_UI_PASSWORD"])
        self.dash_auth = basic_auth(self.env["LDTM_DASHBOARD_USER"], self.env["LDTM_DASHBOARD_PASSWORD"])
        self.client = DagsterGraphQLClient("127.0.0.1", port_number=web_port, headers=self.auth)

    def up(self, *args: str) -> None:
        args = args or ("-d",)
        log(f"{' '.join(compose_cmd())} -p {PROJECT} up {' '.join(args)}")
        try:
            sh([*self.compose, "up", *args], timeout=900)
        except DeployTestFailure:
            # Compose gives up on a dependency that exited (e.g. the code server failing to import):
            # show why before failing.
            dump_state()
            raise
        self.wait_healthy()

    def down(self, volumes: bool = False) -> None:
        # The daemon first, so no sensor launches a run container between their removal and `down`.
        sh([*self.compose, "stop", "ldtm_daemon", "ldtm_webserver"], check=False, timeout=300)
        for cid in run_containers():
            sh(["docker", "rm", "-f", cid], check=False)
        sh([*self.compose, "down", "--remove-orphans", *(["-v"] if volumes else [])], timeout=300)

    def wait_healthy(self) -> None:
        def healthy(name: str) -> bool:
            state = sh(
                [
                    "docker",
                    "inspect",
                    "-f",
                    "{{.State.Status}} {{if .State.Health}}{{.State.Health.Status}}{{end}}",
                    name,
                ],
                check=False,
            ).split()
            if state and state[0] in ("exited", "dead"):
                dump_state(name)
                raise DeployTestFailure(f"{name} exited")
            return state[-1:] == ["healthy"]

        # Every service has a healthcheck (the daemon: its heartbeats in PostgreSQL; the dashboard:
        # Streamlit's /_stcore/health), so `compose ps` can say "all healthy" as the docs promise.
        for name in SERVICES:
            wait(f"{name} healthy", 600, lambda n=name: healthy(n), interval=3, failing=name)
        wait(
            "the code location loaded in the webserver",
            300,
            self.location_loaded,
            interval=3,
            failing="ldtm_webserver",
        )
        wait(
            "the daemon's sensor, backfill and monitoring daemons healthy",
            300,
            self.daemons_healthy,
            interval=5,
            failing="ldtm_daemon",
        )
        wait(
            "the dashboard answers",
            300,
            lambda: self.http(f"http://127.0.0.1:{self.dash_port}/_stcore/health") == "ok",
            interval=3,
            failing="ldtm_dashboard",
        )
        log("stack healthy")

    def http(self, url: str) -> str:
        auth = self.dash_auth if f":{self.dash_port}/" in url else self.auth
        with urllib.request.urlopen(urllib.request.Request(url, headers=auth), timeout=10) as r:
            return r.read().decode()

    def gql(self, query: str, **variables) -> dict:
        req = urllib.request.Request(
            self.url,
            data=json.dumps({"query": query, "variables": variables}).encode(),
            headers={"Content-Type": "application/json", **self.auth},
        )
        with urllib.request.urlopen(req, timeout=60) as r:
            body = json.loads(r.read())
        if body.get("errors"):
            raise DeployTestFailure(f"GraphQL errors: {body['errors']}")
        return body["data"]

    def location_loaded(self) -> bool:
        data = self.gql(
            "{ workspaceOrError { ... on Workspace { locationEntries { name loadStatus"
            " locationOrLoadError { __typename ... on PythonError { message } } } } } }"
        )
        for entry in data["workspaceOrError"]["locationEntries"]:
            if entry["name"] == LOCATION and entry["loadStatus"] == "LOADED":
                if entry["locationOrLoadError"]["__typename"] == "PythonError":
                    raise DeployTestFailure(f"code location failed to load: {entry['locationOrLoadError']}")
                return True
        return False

    def daemons_healthy(self) -> bool:
        data = self.gql("{ instance { daemonHealth { allDaemonStatuses { daemonType healthy required } } } }")
        statuses = {d["daemonType"]: d for d in data["instance"]["daemonHealth"]["allDaemonStatuses"]}
        need = ("SENSOR", "BACKFILL", "MONITORING", "QUEUED_RUN_COORDINATOR")
        return all(statuses.get(k, {}).get("healthy") for k in need)

    # --- runs

    def launch(
        self, job: str, tags: dict, run_config: dict | None = None, assets: list[str] | None = None
    ) -> str:
        if assets is None:
            run_id = self.client.submit_job_execution(
                job,
                repository_location_name=LOCATION,
                repository_name=REPOSITORY,
                run_config=run_config or {},
                tags=tags,
            )
        else:
            selector = {"repositoryLocationName": LOCATION, "repositoryName": REPOSITORY, "jobName": job}
            selector["assetSelection"] = [{"path": [a]} for a in assets]
            data = self.gql(
                "mutation($p: ExecutionParams!) { launchRun(executionParams: $p) { __typename"
                " ... on LaunchRunSuccess { run { runId } } ... on PythonError { message }"
                " ... on RunConfigValidationInvalid { errors { message } } } }",
                p={
                    "selector": selector,
                    "runConfigData": run_config or {},
                    "executionMetadata": {"tags": [{"key": k, "value": v} for k, v in tags.items()]},
                },
            )["launchRun"]
            if data["__typename"] != "LaunchRunSuccess":
                raise DeployTestFailure(f"launchRun {job}: {data}")
            run_id = data["run"]["runId"]
        log(f"launched {job} {run_id[:8]}")
        return run_id

    def run(self, run_id: str) -> dict:
        return self.gql(
            "query($id: ID!) { runOrError(runId: $id) { __typename ... on Run { runId jobName status startTime"
            " tags { key value } } } }",
            id=run_id,
        )["runOrError"]

    def runs(self, job: str) -> list[dict]:
        data = self.gql(
            "query($f: RunsFilter) { runsOrError(filter: $f) { ... on Runs { results { runId status startTime"
            " tags { key value } } } } }",
            f={"pipelineName": job},
        )
        return data["runsOrError"]["results"]

    def run_log_tail(self, run_id: str) -> str:
        data = self.gql(
            "query($id: ID!) { logsForRun(runId: $id, limit: 400) { ... on EventConnection { events {"
            " __typename ... on MessageEvent { message level } } } } }",
            id=run_id,
        )
        events = data["logsForRun"].get("events", [])
        return "\n".join(f"{e.get('level')}: {e.get('message', '')[:400]}" for e in events[-40:])

    def container_of(self, run_id: str) -> str | None:
        ids = sh(["docker", "ps", "-aq", "--filter", f"label=dagster/run_id={run_id}"], check=False).split()
        return ids[0] if ids else None

    def wait_run(self, run_id: str, expect: str = "SUCCESS", seconds: float = RUN_TIMEOUT) -> dict:
        def done():
            run = self.run(run_id)
            if run["status"] in ("SUCCESS", "FAILURE", "CANCELED"):
                return run
            return None

        run = wait(
            f"run {run_id[:8]} to finish",
            seconds,
            done,
            interval=3,
            failing=lambda: self.container_of(run_id),
        )
        if run["status"] != expect:
            print(self.run_log_tail(run_id))
            dump_state(self.container_of(run_id))
            raise DeployTestFailure(
                f"run {run_id} ({run['jobName']}) ended {run['status']}, expected {expect}"
            )
        log(f"{run['jobName']} {run_id[:8]} {run['status']}")
        return run

    def assert_ran_in_its_own_container(self, run_id: str) -> None:
        cid = self.container_of(run_id)
        if not cid:
            raise DeployTestFailure(f"run {run_id} has no container labelled with its id")
        image = sh(["docker", "inspect", "-f", "{{.Config.Image}}", cid]).strip()
        if image != "ldtm_user_code_image":
            raise DeployTestFailure(f"run {run_id} ran in {image}, not ldtm_user_code_image")

    # --- the databases and the volume

    def psql(self, sql: str, db: str = "ldtm", **params) -> str:
        """One statement through psql in the postgres container; values are bound as psql variables
        (:'name' in the SQL), never formatted into it."""
        user = self.env["LDTM_PG_ADMIN_USER"]  # the superuser: the test reads what no role of the stack may
        cmd = [
            "docker",
            "exec",
            "-i",
            "ldtm_postgres",
            "psql",
            "-U",
            user,
            "-d",
            db,
            "-tA",
            "-v",
            "ON_ERROR_STOP=1",
        ]
        for k, v in params.items():
            cmd += ["-v", f"{k}={v}"]
        return sh(cmd, stdin=sql + ";\n").strip()

    def count(self, sql: str, **params) -> int:
        return int(self.psql(sql, **params) or 0)

    def checkpoint_files(self) -> list[str]:
        out = sh(["docker", "exec", "ldtm_dashboard", "find", "/opt/ldtm/artifacts", "-name", "*.pt"])
        return sorted(out.split())

    def gpu_claims(self, run_id: str) -> list:
        data = self.gql(
            '{ instance { concurrencyLimit(concurrencyKey: "gpu") { slotCount'
            " claimedSlots { runId stepKey } pendingSteps { runId stepKey } } } }"
        )["instance"]["concurrencyLimit"]
        return [c for c in data["claimedSlots"] + data["pendingSteps"] if c["runId"] == run_id]


# --- the scenario ----------------------------------------------------------------------------------------


def nightly(stack: Stack, evening: dt.date) -> None:
    """The evening as the schedule runs it: the market run tagged with the evening, then the
    nightly_after_market sensor's nightly_job for that evening partition."""
    market = stack.launch("nightly_market_job", {**RANGE, "ldtm/evening": evening.isoformat()})
    stack.wait_run(market)
    stack.assert_ran_in_its_own_container(market)

    def launched():
        for run in stack.runs("nightly_job"):
            tags = {t["key"]: t["value"] for t in run["tags"]}
            if tags.get("dagster/partition") == evening.isoformat():
                return run["runId"]
        return None

    nightly_run = wait(
        f"the sensor's nightly_job for {evening}", 300, launched, interval=5, failing="ldtm_daemon"
    )
    stack.wait_run(nightly_run)
    stack.assert_ran_in_its_own_container(nightly_run)
    rows = stack.count("select count(*) from snapshots where run_date = :'day'", day=evening)
    if rows != len(TRAINED):
        raise DeployTestFailure(
            f"{rows} snapshot rows for {evening}, expected one per trained ticker {TRAINED}"
        )
    log(f"nightly {evening}: {rows} snapshot rows")

    # The third run of the evening: every submitted model judged once its fillbacks are in.
    def judged():
        for run in stack.runs("external_judgement_job"):
            if {t["key"]: t["value"] for t in run["tags"]}.get(NIGHTLY_RUN_TAG) == nightly_run:
                return run["runId"]
        return None

    judge_run = wait(
        f"the sensor's external_judgement_job after {nightly_run}",
        300,
        judged,
        interval=5,
        failing="ldtm_daemon",
    )
    stack.wait_run(judge_run)
    log(f"nightly {evening}: submitted models judged ({judge_run})")


def step_1_2(stack: Stack) -> None:
    # prices -> features for the demo universe (no evening tag: the nightly sensor leaves it alone)
    market = stack.launch(
        "nightly_market_job",
        RANGE,
        run_config={"ops": {"prices": {"config": {"start": str(START), "end": str(AS_OF)}}}},
    )
    stack.wait_run(market)
    stack.assert_ran_in_its_own_container(market)

    # the checkpoints backfill: features, checkpoints, backtests over every ticker (single-run policy)
    data = stack.gql(
        "mutation($p: LaunchBackfillParams!) { launchPartitionBackfill(backfillParams: $p) { __typename"
        " ... on LaunchBackfillSuccess { backfillId } ... on PythonError { message } } }",
        p={
            "partitionNames": TICKERS,
            "assetSelection": [{"path": [a]} for a in ("features", "checkpoints", "backtests")],
            "tags": [{"key": k, "value": v} for k, v in GPU_TAGS.items()],
        },
    )["launchPartitionBackfill"]
    if data["__typename"] != "LaunchBackfillSuccess":
        raise DeployTestFailure(f"launchPartitionBackfill: {data}")
    backfill = data["backfillId"]
    log(f"backfill {backfill} launched")

    def backfill_runs():
        runs = stack.gql(
            "query($f: RunsFilter) { runsOrError(filter: $f) { ... on Runs { results { runId status } } } }",
            f={"tags": [{"key": "dagster/backfill", "value": backfill}]},
        )["runsOrError"]["results"]
        return runs or None

    for run in wait("the backfill's run", 300, backfill_runs, interval=5, failing="ldtm_daemon"):
        stack.wait_run(run["runId"])
        stack.assert_ran_in_its_own_container(run["runId"])

    def backfill_done():
        status = stack.gql(
            "query($id: String!) { partitionBackfillOrError(backfillId: $id) { ... on PartitionBackfill { status } } }",
            id=backfill,
        )["partitionBackfillOrError"]["status"]
        if status in ("FAILED", "CANCELED", "COMPLETED_FAILED"):
            raise DeployTestFailure(f"backfill {backfill} {status}")
        return status in ("COMPLETED", "COMPLETED_SUCCESS")

    wait(f"backfill {backfill} completed", 300, backfill_done, interval=5, failing="ldtm_daemon")
    TRAINED[:] = stack.psql("select distinct ticker from model_registry order by ticker").split()
    if len(TRAINED) < 3 or not set(TRAINED) <= set(TICKERS):
        raise DeployTestFailure(f"models after the backfill for {TRAINED} only (universe {TICKERS})")
    log(f"backfill trained {TRAINED}; no model for {sorted(set(TICKERS) - set(TRAINED))}")

    # the promotion sensor: one gate run per backtests partition
    sensor = stack.gql(
        "query($s: SensorSelector!) { sensorOrError(sensorSelector: $s) { ... on Sensor { sensorState { status } } } }",
        s={
            "repositoryLocationName": LOCATION,
            "repositoryName": REPOSITORY,
            "sensorName": "promotion_gate_sensor",
        },
    )["sensorOrError"]["sensorState"]["status"]
    if sensor != "RUNNING":
        raise DeployTestFailure(f"promotion_gate_sensor is {sensor}")

    def gate_runs():
        runs = stack.runs("promotion_job")
        keys = {t["value"] for r in runs for t in r["tags"] if t["key"] == "dagster/partition"}
        return runs if keys >= set(TRAINED) else None

    for run in wait(
        "a gate run per ticker from promotion_gate_sensor", 600, gate_runs, interval=5, failing="ldtm_daemon"
    ):
        stack.wait_run(run["runId"])
        stack.assert_ran_in_its_own_container(run["runId"])
    gate = stack.psql("select status, count(*) from model_registry group by status")
    log(f"gate verdicts (status|models): {gate.split()}")

    nightly(stack, EVENING_1)

    # step 2: the rows in the compose PostgreSQL, the checkpoints in the volume, the dashboard
    for table in ("prices", "features", "model_registry", "backtest_folds", "snapshots"):
        n = stack.count('select count(*) from :"t"', t=table)
        if n == 0:
            raise DeployTestFailure(f"table {table} of the ldtm database is empty")
        log(f"ldtm.{table}: {n} rows")
    files = stack.checkpoint_files()
    paths = stack.psql("select checkpoint_path from model_registry").split()
    missing = [p for p in paths if not any(f.endswith(Path(p).name) for f in files)]
    if len(files) < len(TRAINED) or missing:
        raise DeployTestFailure(
            f"checkpoints in the volume: {len(files)} files; registry paths missing: {missing}"
        )
    log(f"{len(files)} checkpoint files in volume {ARTIFACTS}")
    dashboard_leaderboard(stack)


DASHBOARD_PROBE = """
import json
from streamlit.testing.v1 import AppTest
from ldtm_core.accountability.board.leaderboard import leaderboard
from ldtm_dashboard import APP
from ldtm_dashboard.data import engine
at = AppTest.from_file(str(APP.parent / "views" / "leaderboard.py"), default_timeout=240)
at.run()
assert not at.exception, [e.value for e in at.exception]
# The board is the table with accuracies (the "No production model" table may stand beside or alone).
boards = [d.value for d in at.dataframe if "direction_accuracy" in d.value.columns]
shown = sorted(boards[0]["ticker"].tolist()) if boards else []
board = leaderboard(engine())
# The page ranks the tickers with a filled evening; the stale ones (none filled yet) are named above it.
print(json.dumps({"shown": shown, "expected": sorted(board[~board["stale"]]["ticker"].tolist())}))
"""


def dashboard_leaderboard(stack: Stack) -> list:
    """The dashboard container answers on its port and renders the leaderboard page from the
    database: the tickers it shows are ldtm_core's leaderboard of the compose PostgreSQL."""
    page = stack.http(f"http://127.0.0.1:{stack.dash_port}/")
    if "<html" not in page.lower():
        raise DeployTestFailure("the dashboard's port does not serve its page")
    out = sh(["docker", "exec", "ldtm_dashboard", "python", "-c", DASHBOARD_PROBE], timeout=300)
    board = json.loads(out.strip().splitlines()[-1])
    if board["shown"] != board["expected"]:
        raise DeployTestFailure(
            f"the dashboard's leaderboard shows {board['shown']}, the database's is {board['expected']}"
        )
    log(f"dashboard leaderboard: {board['shown']}")
    return board["shown"]


def container_env(name: str) -> dict:
    out = sh(["docker", "inspect", "-f", "{{json .Config.Env}}", name])
    return dict(item.split("=", 1) for item in json.loads(out))


def step_security(stack: Stack) -> None:
    """docs/operations.md, Security, claim by claim: no request without the password reaches the UI or
    the dashboard; each secret is in no container that does not need it; the webserver has no Docker
    socket and its proxy passes nothing but what "Terminate" needs, which works; a run config that reads
    a secret into a resource field fails without showing it, and is not retried."""
    ui, dash = f"http://127.0.0.1:{stack.web_port}", f"http://127.0.0.1:{stack.dash_port}"
    wrong = basic_auth(stack.env["LDTM_UI_USER"], stack.env["LDTM_UI_PASSWORD"] + "x")
    query = json.dumps({"query": "{ version }"}).encode()
    for url, data, right, other in (
        (f"{ui}/", None, stack.auth, stack.dash_auth),
        (f"{ui}/graphql", query, stack.auth, stack.dash_auth),
        (f"{dash}/", None, stack.dash_auth, stack.auth),
        (f"{dash}/_stcore/health", None, stack.dash_auth, stack.auth),
    ):
        # No password, a wrong one, and the other service's (a dashboard reader is no Dagster operator).
        for headers in ({}, wrong, other):
            got = status_of(url, {"Content-Type": "application/json", **headers}, data)
            if got != 401:
                raise DeployTestFailure(f"{url} answered {got} to a request without its own password")
        if status_of(url, {"Content-Type": "application/json", **right}, data) != 200:
            raise DeployTestFailure(f"{url} refused the right password")
    log("the UI and the dashboard each refuse requests without their own password (401), answer with it")

    secrets_of = {k: v for k, v in stack.env.items() if k.endswith(("_PASSWORD", "_KEY"))}
    database = {k for k in secrets_of if k.startswith(("LDTM_PG_", "DAGSTER_PG_"))}
    may_hold = {
        "ldtm_postgres": database,
        "ldtm_migrate": {"LDTM_PG_OWNER_PASSWORD"},
        "ldtm_user_code": {"DAGSTER_PG_PASSWORD", "LDTM_PG_APP_PASSWORD", "LDTM_AUDIT_KEY"},
        "ldtm_daemon": {"DAGSTER_PG_PASSWORD", "LDTM_PG_APP_PASSWORD", "LDTM_AUDIT_KEY"},
        # The receipt key: the signer alone (issue 61), which reads as the reader role.
        "ldtm_signer": {"LDTM_PG_READER_PASSWORD", "LDTM_RECEIPT_KEY"},
        "ldtm_webserver": {"DAGSTER_PG_PASSWORD"},
        "ldtm_dashboard": {"LDTM_PG_READER_PASSWORD"},
        "ldtm_proxy": {"LDTM_UI_PASSWORD", "LDTM_DASHBOARD_PASSWORD"},
        "ldtm_docker_proxy": set(),
    }
    if set(secrets_of) != set().union(*may_hold.values()):
        raise DeployTestFailure(f"new_env.sh made {sorted(secrets_of)}, not the secrets the stack has")
    for name, allowed in may_hold.items():
        text = json.dumps(container_env(name))
        held = {k for k, v in secrets_of.items() if v in text}
        if held - allowed:
            raise DeployTestFailure(f"{name} holds {sorted(held - allowed)} in its environment")
    log("each secret is only in the environment of the containers that need it")

    # The roles: the dashboard's reads, the application's writes but never deletes a published evening.
    def as_service(container: str, sql: str) -> str:
        probe = (
            "import os, sqlalchemy\n"
            "e = sqlalchemy.create_engine(os.environ['LDTM_DATABASE_URL'])\n"
            "try:\n"
            f" with e.begin() as c: c.exec_driver_sql({sql!r})\n"
            " print('allowed')\n"
            "except sqlalchemy.exc.ProgrammingError as x:\n"
            " print('denied' if 'permission denied' in str(x) or 'must be owner' in str(x) else x)"
        )
        return sh(["docker", "exec", container, "python", "-c", probe]).strip().splitlines()[-1]

    checks = [
        ("ldtm_dashboard", "SELECT count(*) FROM snapshots", "allowed"),
        ("ldtm_dashboard", "UPDATE model_registry SET status = status", "denied"),
        ("ldtm_dashboard", "CREATE TABLE t (x int)", "denied"),
        ("ldtm_user_code", "UPDATE model_registry SET status = status", "allowed"),
        ("ldtm_user_code", "DELETE FROM snapshots", "denied"),
        ("ldtm_user_code", "UPDATE snapshots SET row_hash = row_hash", "denied"),
        ("ldtm_user_code", "DROP TABLE snapshots", "denied"),
        # The reader cannot take the advisory locks the chain's writers and the migrations wait on.
        ("ldtm_dashboard", "SELECT pg_advisory_lock(7400123)", "denied"),
        ("ldtm_signer", "SELECT count(*) FROM snapshots", "allowed"),
        ("ldtm_signer", "UPDATE snapshots SET row_hash = row_hash", "denied"),
        ("ldtm_signer", "INSERT INTO run_log (run_id) VALUES ('x')", "denied"),
    ]
    for container, sql, expected in checks:
        got = as_service(container, sql)
        if got != expected:
            raise DeployTestFailure(f"{container}: `{sql}` {got}, expected {expected}")
    if stack.count("select count(*) from snapshots") == 0:
        raise DeployTestFailure("no snapshots to protect: the role checks need the nightly's rows")
    log("the dashboard's role only reads; the app's writes rows but cannot delete or rewrite snapshots")
    probe = (
        "import os, sqlalchemy\n"
        "u = sqlalchemy.make_url(os.environ['LDTM_DATABASE_URL']).set(database='postgres')\n"
        "try:\n sqlalchemy.create_engine(u).connect(); print('allowed')\n"
        "except sqlalchemy.exc.OperationalError as x:\n print('denied' if 'permission denied' in str(x) else x)"
    )
    for container in ("ldtm_user_code", "ldtm_dashboard", "ldtm_signer"):
        got = sh(["docker", "exec", container, "python", "-c", probe]).strip().splitlines()[-1]
        if got != "denied":
            raise DeployTestFailure(f"{container}'s role connecting to the database `postgres`: {got}")
    log("no role of the stack connects to the maintenance database; the reader cannot take advisory locks")

    # Artifacts (pickled step outputs that runs load) cannot be written by the services that only read.
    for container in ("ldtm_webserver", "ldtm_dashboard"):
        assert_read_only(container, "/opt/ldtm/artifacts")
    # The receipts: only the signer mounts them, and its log names each signature.
    for container in ("ldtm_user_code", "ldtm_daemon", "ldtm_webserver", "ldtm_dashboard"):
        if "ldtm_receipts" in sh(["docker", "inspect", "-f", "{{json .Mounts}}", container]):
            raise DeployTestFailure(f"{container} mounts the receipts volume")
    signer_mounts = sh(["docker", "inspect", "-f", "{{json .Mounts}}", "ldtm_signer"])
    if "docker.sock" in signer_mounts or "ldtm_receipts" not in signer_mounts:
        raise DeployTestFailure(f"ldtm_signer's mounts: {signer_mounts}")
    wait(
        "ldtm_signer's first signature in its log", 120, lambda: "signed receipt" in signer_log(), interval=5
    )
    log(
        "artifacts read-only to the webserver and the dashboard; receipts mounted by ldtm_signer alone, which logs each signature"
    )

    mounts = sh(["docker", "inspect", "-f", "{{json .Mounts}}", "ldtm_webserver"])
    if "docker.sock" in mounts:
        raise DeployTestFailure("the webserver mounts the Docker socket")
    probe = (
        "import urllib.request, urllib.error\n"
        "try:\n urllib.request.urlopen('http://ldtm_docker_proxy:2375/containers/json', timeout=10); print(200)\n"
        "except urllib.error.HTTPError as e:\n print(e.code)"
    )
    listed = sh(["docker", "exec", "ldtm_webserver", "python3", "-c", probe]).strip()
    if listed != "403":
        raise DeployTestFailure(f"the webserver listed containers through ldtm_docker_proxy: {listed}")
    log("the webserver has no Docker socket; through ldtm_docker_proxy it cannot list containers (403)")

    # "Terminate" in the UI: the webserver stops the run's container through the socket proxy.
    run_id = stack.launch("retrain_job", {**RANGE, **GPU_TAGS}, assets=["checkpoints"])
    wait("the run to terminate to have its container", 600, lambda: stack.container_of(run_id), interval=2)
    wait("it to start", 600, lambda: stack.run(run_id)["status"] == "STARTED", interval=2)
    out = stack.gql(
        "mutation($id: String!) { terminateRun(runId: $id) { __typename"
        " ... on TerminateRunFailure { message } ... on PythonError { message } } }",
        id=run_id,
    )["terminateRun"]
    if out["__typename"] != "TerminateRunSuccess":
        raise DeployTestFailure(f"terminateRun: {out}")
    stack.wait_run(run_id, expect="CANCELED", seconds=300)
    cid = stack.container_of(run_id)
    if sh(["docker", "inspect", "-f", "{{.State.Running}}", cid]).strip() != "false":
        raise DeployTestFailure(f"the terminated run's container {cid[:12]} still runs")
    log(f"terminated run {run_id[:8]} from the UI: CANCELED, its container stopped")

    # Through the socket proxy, only this deployment's run containers, and never their environment.
    def through_proxy(path: str, method: str = "GET") -> tuple[str, str]:
        probe = (
            "import urllib.request, urllib.error\n"
            f"r = urllib.request.Request('http://ldtm_docker_proxy:2375{path}', method='{method}')\n"
            "try:\n a = urllib.request.urlopen(r, timeout=30); print(a.status); print(a.read().decode())\n"
            "except urllib.error.HTTPError as e:\n print(e.code); print(e.read().decode())"
        )
        out = sh(["docker", "exec", "ldtm_webserver", "python3", "-c", probe]).strip().split("\n", 1)
        return out[0], out[1] if len(out) > 1 else ""

    postgres_id = sh(["docker", "inspect", "-f", "{{.Id}}", "ldtm_postgres"]).strip()
    for path, method in (
        (f"/v1.41/containers/{postgres_id}/json", "GET"),
        (f"/v1.41/containers/{postgres_id}/stop", "POST"),
    ):
        status, _ = through_proxy(path, method)
        if status != "403":
            raise DeployTestFailure(
                f"the socket proxy answered {status} to {method} {path} (PostgreSQL's container)"
            )
    full_id = sh(["docker", "inspect", "-f", "{{.Id}}", cid]).strip()
    status, body = through_proxy(f"/v1.41/containers/{full_id}/json")
    run_env = sh(["docker", "inspect", "-f", "{{json .Config.Env}}", cid])
    if status != "200" or stack.env["LDTM_AUDIT_KEY"] not in run_env or stack.env["LDTM_AUDIT_KEY"] in body:
        raise DeployTestFailure(
            f"inspect of a run container through the proxy: {status}, environment shown or absent"
        )
    if stack.env["LDTM_RECEIPT_KEY"] in run_env:
        raise DeployTestFailure("a run container holds LDTM_RECEIPT_KEY")
    log(
        "the socket proxy refuses PostgreSQL's container by id, shows a run's without its environment; runs hold no receipt key"
    )

    users = {
        name: sh(["docker", "exec", name, "id", "-u"]).strip() for name in SERVICES if name != "ldtm_postgres"
    }
    users["a run"] = sh(["docker", "inspect", "-f", "{{.Config.User}}", cid]).strip()
    expected = {
        name: "10001" for name in ("ldtm_user_code", "ldtm_webserver", "ldtm_dashboard", "ldtm_signer")
    }
    expected |= {"ldtm_daemon": "0", "ldtm_docker_proxy": "0", "ldtm_proxy": "65534", "a run": "ldtm"}
    if users != expected:
        raise DeployTestFailure(f"the services run as {users}, expected {expected}")
    log("only the daemon and the socket proxy run as root (the socket); the rest as ldtm or nobody")

    # A crash of the daemon (the nightly's schedule, every sensor): its restart policy brings it back.
    pid = sh(["docker", "inspect", "-f", "{{.State.Pid}}", "ldtm_daemon"]).strip()
    restarts = int(sh(["docker", "inspect", "-f", "{{.RestartCount}}", "ldtm_daemon"]).strip())
    sh(["kill", "-9", pid])
    wait(
        "the crashed daemon restarted by its policy",
        120,
        lambda: (
            int(sh(["docker", "inspect", "-f", "{{.RestartCount}}", "ldtm_daemon"]).strip()) > restarts
            and sh(["docker", "inspect", "-f", "{{.State.Running}}", "ldtm_daemon"]).strip() == "true"
        ),
        interval=2,
        failing="ldtm_daemon",
    )
    wait("its daemons healthy again", 300, stack.daemons_healthy, interval=5, failing="ldtm_daemon")
    log("a daemon killed with SIGKILL came back by itself (restart: unless-stopped) and is healthy")

    # The probe's exfiltration: a run config filling a resource field from a secret's variable.
    key = stack.env["LDTM_AUDIT_KEY"]
    leak = stack.launch(
        "nightly_market_job",
        {**RANGE, "ldtm/evening": EVENING_1.isoformat()},
        run_config={"resources": {"database": {"config": {"url": {"env": "LDTM_AUDIT_KEY"}}}}},
    )
    stack.wait_run(leak, expect="FAILURE")
    events = stack.gql(
        "query($id: ID!) { logsForRun(runId: $id, limit: 1000) { ... on EventConnection { events {"
        " __typename ... on MessageEvent { message } ... on ErrorEvent { error { message stack"
        " cause { message } } } } } } }",
        id=leak,
    )
    if key in json.dumps(events):
        raise DeployTestFailure(f"run {leak[:8]}'s event log shows LDTM_AUDIT_KEY")
    if key in sh(["docker", "logs", stack.container_of(leak)], check=False):
        raise DeployTestFailure(f"run {leak[:8]}'s container log shows LDTM_AUDIT_KEY")
    time.sleep(45)  # run_retries would have queued its retry within a few daemon ticks
    tags = {t["key"]: t["value"] for t in stack.run(leak)["tags"]}
    if "dagster/auto_retry_run_id" in tags:
        raise DeployTestFailure(f"run {leak[:8]} failed for its config, and was retried")
    log(
        f"a run config reading LDTM_AUDIT_KEY into a resource failed ({leak[:8]}) without showing it, no retry"
    )


def step_3_kill(stack: Stack) -> None:
    """Kill a checkpoints run's container mid-training; run monitoring fails it, frees its slots; the
    automatic retry (run_retries, ALL_STEPS from the job's tags) trains only the tickers the killed run
    had not finished."""
    run_id = stack.launch(
        "retrain_job",
        {**RANGE, **GPU_TAGS},  # the instance's run_retries launches the retry below
        # One chunk step per ticker on the CPU pool of 2 slots: the first candidate lands while 4 wait.
        assets=["checkpoints"],
    )

    def started() -> float | None:
        run = stack.run(run_id)
        if run["status"] in ("SUCCESS", "FAILURE", "CANCELED"):
            raise DeployTestFailure(f"run {run_id} ended {run['status']} before it could be killed")
        return run["startTime"]

    start = wait("the retrain to start", 600, started, interval=2, failing=lambda: stack.container_of(run_id))
    since = {"since": start}

    def first_trained() -> int:
        n = stack.count(
            "select count(distinct ticker) from model_registry where created_at >= to_timestamp(:'since')",
            **since,
        )
        if n >= len(TRAINED):
            raise DeployTestFailure(
                "every ticker trained before the kill: the kill test needs slower training"
            )
        return n

    wait(
        "the first ticker of the retrain",
        600,
        first_trained,
        interval=1,
        failing=lambda: stack.container_of(run_id),
    )
    cid = stack.container_of(run_id)
    sh(["docker", "kill", cid])
    done_by_killed = stack.count(
        "select count(distinct ticker) from model_registry where created_at >= to_timestamp(:'since')",
        **since,
    )
    log(f"killed run container {cid[:12]} after {done_by_killed} of {len(TRAINED)} tickers")

    run = stack.wait_run(run_id, expect="FAILURE", seconds=300)
    exit_code = sh(["docker", "inspect", "-f", "{{.State.ExitCode}}", cid]).strip()
    if exit_code != "137":
        raise DeployTestFailure(f"the killed container exited {exit_code}, not 137")
    wait(
        f"run {run_id[:8]}'s gpu slots freed",
        300,
        lambda: not stack.gpu_claims(run_id),
        interval=5,
        failing="ldtm_daemon",
    )
    log(f"run {run_id[:8]} marked {run['status']} by run monitoring, gpu slots freed")

    tags = {t["key"]: t["value"] for t in run["tags"]}
    if tags.get("dagster/retry_strategy") != "ALL_STEPS":
        raise DeployTestFailure(f"run {run_id} does not carry retrain_job's ALL_STEPS retry strategy: {tags}")

    def retried() -> str | None:
        # FROM_FAILURE (the default) would reuse the killed run's plan and train nothing; ALL_STEPS re-plans.
        got = {t["key"]: t["value"] for t in stack.run(run_id)["tags"]}
        return got.get("dagster/auto_retry_run_id")

    retry = wait(f"run_retries to retry run {run_id[:8]}", 300, retried, interval=3, failing="ldtm_daemon")
    retry_run = stack.wait_run(retry)
    stack.assert_ran_in_its_own_container(retry)
    per_ticker = stack.psql(
        "select ticker, count(*) from model_registry where created_at >= to_timestamp(:'since')"
        " group by ticker order by ticker",
        **since,
    )
    counts = dict(line.split("|") for line in per_ticker.splitlines())
    by_retry = stack.count(
        "select count(*) from model_registry where created_at >= to_timestamp(:'since')",
        since=retry_run["startTime"],
    )
    if sorted(counts) != TRAINED or set(counts.values()) != {"1"}:
        raise DeployTestFailure(
            f"candidates per ticker since the killed run started: {counts} (want one each)"
        )
    if by_retry != len(TRAINED) - done_by_killed:
        raise DeployTestFailure(
            f"the automatic retry trained {by_retry} tickers, expected {len(TRAINED) - done_by_killed}"
        )
    log(f"automatic retry {retry[:8]} trained the remaining {by_retry} ticker(s) only")


def step_4_restart(stack: Stack) -> None:
    runs_before = len(
        stack.gql("{ runsOrError { ... on Runs { results { runId } } } }")["runsOrError"]["results"]
    )
    rows_before = (
        stack.count("select count(*) from snapshots"),
        stack.count("select count(*) from model_registry"),
    )
    files_before = stack.checkpoint_files()
    log("compose down (volumes kept), then up")
    stack.down()
    stack.up()
    runs_after = len(
        stack.gql("{ runsOrError { ... on Runs { results { runId } } } }")["runsOrError"]["results"]
    )
    rows_after = (
        stack.count("select count(*) from snapshots"),
        stack.count("select count(*) from model_registry"),
    )
    if runs_after < runs_before or rows_after != rows_before or stack.checkpoint_files() != files_before:
        raise DeployTestFailure(
            f"lost across down/up: runs {runs_before}->{runs_after}, rows {rows_before}->{rows_after}, "
            f"checkpoint files {len(files_before)}->{len(stack.checkpoint_files())}"
        )
    log(
        f"survived down/up: {runs_after} runs, (snapshots, models) {rows_after}, {len(files_before)} checkpoints"
    )
    nightly(stack, EVENING_2)
    filled = stack.count(
        "select count(*) from snapshots where run_date = :'day' and next_day_actual is not null",
        day=EVENING_1,
    )
    log(f"{EVENING_1}: {filled} next-day actuals filled back on {EVENING_2}")
    if filled != len(TRAINED):
        raise DeployTestFailure(
            f"{filled} of {EVENING_1}'s snapshots filled back after {EVENING_2}'s nightly"
        )
    # The default board ranks gated models only (a ticker the gate held serves an ungated candidate).
    gated = sorted(
        t for t in stack.psql("select ticker from model_registry where status = 'active'").split() if t
    )
    if sorted(dashboard_leaderboard(stack)) != gated:
        raise DeployTestFailure(
            f"after {EVENING_2} the leaderboard should rank every ticker with an active model: {gated}"
        )


def assert_read_only(container: str, folder: str) -> None:
    """`container` cannot write into `folder` (its mount is read-only)."""
    touch = subprocess.run(
        ["docker", "exec", container, "touch", f"{folder}/probe"], capture_output=True, text=True
    )
    if touch.returncode == 0 or "Read-only file system" not in touch.stderr:
        raise DeployTestFailure(f"{container} could write into {folder}: {touch.stderr!r}")


def signer_log() -> str:
    return sh(["docker", "logs", "ldtm_signer"], quiet=True)


def signed_up_to() -> int:
    """The last snapshot id ldtm_signer's log says a receipt covers (0: none yet)."""
    ends = re.findall(r"signed receipt \d+ with key \w+: rows \d+-(\d+)", signer_log())
    return int(ends[-1]) if ends else 0


def wait_for_signer(stack: Stack) -> None:
    """Until ldtm_signer's log says a receipt covers the newest snapshot row."""
    newest = stack.count("select coalesce(max(id), 0) from snapshots")
    wait(f"ldtm_signer to cover snapshot {newest}", 120, lambda: signed_up_to() >= newest, interval=5)


def step_4_receipts(stack: Stack) -> None:
    """The record handed to an outsider, by docs/operations.md's commands for the compose stack."""
    wait_for_signer(stack)
    listed = sh(["docker", "exec", "ldtm_signer", "ls", "/opt/ldtm/receipts"]).split()
    evenings = [name for name in listed if name.endswith(".receipt.json") and "_evening_" in name]
    if not evenings:
        raise DeployTestFailure(f"the receipts volume holds {listed}: the signer signed no evening")
    folder = Path(tempfile.mkdtemp(prefix="ldtm-record-"))
    try:
        (folder / "receipts.pub").write_text(
            sh(["docker", "exec", "ldtm_signer", "ldtm", "receipts", "public-key"])
        )
        sh(["docker", "exec", "ldtm_user_code", "ldtm", "audit", "export", "/tmp/track_record"], timeout=300)
        sh(["docker", "cp", "ldtm_user_code:/tmp/track_record", str(folder / "track_record")])
        sh(["docker", "exec", "ldtm_user_code", "rm", "-rf", "/tmp/track_record"])
        sh(["docker", "cp", "ldtm_signer:/opt/ldtm/receipts", str(folder / "receipts")])
        # The outsider: this host's ldtm, no database URL, no secret (wide lines: one finding a line).
        outsider = {
            "PATH": os.environ["PATH"],
            "HOME": str(folder),
            "LDTM_HOME": str(folder / "home"),
            "COLUMNS": "400",
        }
        p = subprocess.run(
            [str(Path(sys.executable).parent / "ldtm"), "verify-record", "track_record", "receipts",
             "--public-key", "receipts.pub"],
            cwd=folder, env=outsider, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        covered = re.search(r"(\d+) of (\d+) exported rows are covered", p.stdout)
        if not covered or covered.group(1) != covered.group(2):
            raise DeployTestFailure(f"not every exported row is covered by a receipt: {p.stdout[-2000:]}")
        # The evenings here are 2024's, predicted today: each live row's receipt follows its target's close,
        # which the verifier must say, row by row; any other finding (removed, edited, chain...) fails.
        findings = re.findall(r"^(\w+): (\S+) (\d{4}-\d\d-\d\d): ", p.stderr, re.M)
        late = {(t, d) for kind, t, d in findings if kind == "late"}
        expected = {(t, e.isoformat()) for t in TRAINED for e in (EVENING_1, EVENING_2)}
        if p.returncode != 1 or len(findings) != len(late) or late != expected:
            raise DeployTestFailure(
                f"verify-record on the compose store's export (exit {p.returncode}), expected exactly one "
                f"'late' finding per row:\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
            )
        log(
            f"{len(evenings)} evening receipts; verify-record on this host: {covered.group(0)}, and each "
            f"of the {len(late)} rows of 2024's evenings named as recorded after its target's close"
        )
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def db_state(stack: Stack) -> dict:
    """Every app table's row count and checksum, Dagster's run count, the artifacts' checksums."""
    tables = stack.psql(
        "select table_name from information_schema.tables where table_schema = 'public'"
        " and table_type = 'BASE TABLE' order by table_name"
    ).split()
    state = {}
    for table in tables:
        state[table] = stack.psql(
            "select count(*) || ' ' || md5(coalesce(string_agg(x::text, '|' order by x::text), ''))"
            ' from :"t" x',
            t=table,
        )
    state["dagster.runs"] = stack.psql(
        "select count(*) from runs", db=stack.env.get("DAGSTER_PG_DB", "dagster")
    )
    state["artifacts"] = sh(
        [
            "docker",
            "exec",
            "ldtm_dashboard",
            "sh",
            "-c",
            "cd /opt/ldtm/artifacts && find . -type f ! -path './dagster/*' | sort | xargs -r sha256sum",
        ]
    )
    state["receipts"] = sh(
        [
            "docker",
            "exec",
            "ldtm_signer",
            "sh",
            "-c",
            "cd /opt/ldtm/receipts && find . -type f | sort | xargs -r sha256sum",
        ]
    )
    return state


def step_submissions(stack: Stack) -> None:
    """docs/bring-your-own-model.md on the stack: a file dropped into the ldtm_submissions volume (read-only
    to the code server) is picked up by submission_sensor and submitted in a run container; one past its
    cut-off (every evening here is years old) fails its run naming the cut-off, with nothing written."""
    sh(["docker", "exec", "ldtm_user_code", "ldtm", "models", "register", "--external", "deploy-desk",
        "--tickers", TRAINED[0]])  # fmt: skip
    assert_read_only("ldtm_user_code", "/opt/ldtm/submissions")
    rows = f"ticker,run_date,horizon,direction\n{TRAINED[0]},{EVENING_1},next_day,bullish\n"
    sh(["docker", "run", "--rm", "-i", "--user", "0", "--entrypoint", "sh", "-v", f"{SUBMISSIONS}:/in",
        "ldtm_user_code_image", "-c", "mkdir -p /in/deploy-desk && cat > /in/deploy-desk/evening.csv"],
       stdin=rows)  # fmt: skip
    before = stack.count("select count(*) from snapshots")

    def launched():
        runs = [r for r in stack.runs("submission_job") if {t["key"]: t["value"] for t in r["tags"]}.get(
            "ldtm/submitted_model") == "deploy-desk"]  # fmt: skip
        return runs[0]["runId"] if runs else None

    run_id = wait(
        "submission_sensor's run for the dropped file", 300, launched, interval=5, failing="ldtm_daemon"
    )
    stack.wait_run(run_id, expect="FAILURE")
    stack.assert_ran_in_its_own_container(run_id)
    events = stack.gql(
        "query($id: ID!) { logsForRun(runId: $id, limit: 1000) { ... on EventConnection { events {"
        " __typename ... on ErrorEvent { error { message cause { message } } } } } } }",
        id=run_id,
    )
    tail = json.dumps(events)
    if "closed to live submissions" not in tail:
        raise DeployTestFailure(
            f"submission run {run_id[:8]} failed without naming the cut-off: {tail[-800:]}"
        )
    if stack.count("select count(*) from snapshots") != before:
        raise DeployTestFailure("a refused submission wrote snapshot rows")
    log(
        f"a dropped file was submitted by the sensor ({run_id[:8]}) and refused past its cut-off, nothing written"
    )


def step_5_backup_restore(stack: Stack) -> None:
    """deploy/scripts/backup.sh, both volumes destroyed, restore.sh into a fresh PostgreSQL: the same rows."""
    # The daemon stopped first, so no sensor tick or run writes between the snapshot and the dump.
    sh([*stack.compose, "stop", "ldtm_daemon"], timeout=300)
    wait_for_signer(stack)
    before = db_state(stack)
    folder = Path(tempfile.mkdtemp(prefix="ldtm-backup-"))
    try:
        out = sh(["deploy/scripts/backup.sh", str(folder)], timeout=600)
        log(out.strip())
        # The dump holds every table and the roles' password hashes: the owner alone reads it.
        modes = {p.name: oct(p.stat().st_mode & 0o777) for p in (folder, *folder.iterdir())}
        expected = {"postgres.sql.gz": "0o600", "artifacts.tgz": "0o600", "receipts.tgz": "0o600"}
        if modes != {folder.name: "0o700", **expected}:
            raise DeployTestFailure(f"the backup's modes are {modes}")
        log("compose down -v: the PostgreSQL, artifacts and receipts volumes are destroyed")
        stack.down(volumes=True)
        for volume in (ARTIFACTS, RECEIPTS):
            if sh(["docker", "volume", "ls", "-q", "--filter", f"name={volume}"]).split():
                raise DeployTestFailure(f"volume {volume} survived down -v")
        sh([*stack.compose, "up", "-d", "ldtm_postgres"], timeout=300)
        out = sh(["deploy/scripts/restore.sh", str(folder)], timeout=600)
        log(out.strip())
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    stack.up()
    after = db_state(stack)
    changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
    if changed:
        raise DeployTestFailure(
            "after backup, down -v and restore these differ: "
            + "; ".join(f"{k}: {before.get(k)!r} -> {after.get(k)!r}" for k in changed)[:3000]
        )
    log(
        f"backup -> down -v -> restore: {len(before) - 3} app tables identical "
        f"({before['model_registry'].split()[0]} models, {before['snapshots'].split()[0]} snapshots), "
        f"{before['dagster.runs']} Dagster runs, {len(before['artifacts'].splitlines())} artifact files, "
        f"{len(before['receipts'].splitlines())} receipt files"
    )


def report_images() -> None:
    """The image sizes the docs quote, and that no builder stage is left dangling."""
    sizes = sh(["docker", "image", "ls", "--format", "{{.Repository}}:{{.Tag}} {{.Size}}"])
    for line in sizes.splitlines():
        if line.startswith(("ldtm_user_code_image", "ldtm_dagster_image", "ldtm-base", "ldtm-postgres:")):
            log(f"image {line}")
    dangling = sh(["docker", "images", "-q", "-f", "dangling=true", "-f", "label=ldtm.stage=builder"]).split()
    if dangling:
        raise DeployTestFailure(f"builder stages left dangling after the build: {dangling}")
    log(
        f"dangling images after the build: {len(sh(['docker', 'images', '-q', '-f', 'dangling=true']).split())}"
    )


def leftovers() -> list[str]:
    out = sh(
        [
            "docker",
            "ps",
            "-a",
            "--format",
            "{{.Names}}",
            "--filter",
            f"label=com.docker.compose.project={PROJECT}",
        ],
        check=False,
    ).split()
    out += run_containers()
    nets = sh(["docker", "network", "ls", "-q", "--filter", f"name=^{NETWORK}$"], check=False).split()
    vols = sh(["docker", "volume", "ls", "-q"], check=False).split()
    return (
        out
        + nets
        + [v for v in vols if v in (ARTIFACTS, RECEIPTS, SUBMISSIONS) or v.startswith(f"{PROJECT}_")]
    )


def main() -> int:
    engine = start_engine()
    env_file = Path(tempfile.mkdtemp(prefix="ldtm-deploy-")) / "test.env"
    web_port, dash_port = free_port(), free_port()
    env_lines, up_args = documented_offline_recipe()
    # The documented recipe: new_env.sh (env.example with fresh random secrets), then its `.env` lines;
    # after them only what this test must own (free ports, the demo universe and profile, synthetic prices).
    sh([str(REPO / "deploy/scripts/new_env.sh"), str(env_file)])
    env_file.write_text(
        env_file.read_text()
        + "\n".join(
            [
                *env_lines,
                "LDTM_UNIVERSE=demo",
                "LDTM_PROFILE=demo",
                "LDTM_PRICE_SOURCE=synthetic",
                f"LDTM_WEBSERVER_PORT={web_port}",
                f"LDTM_DASHBOARD_PORT={dash_port}",
            ]
        )
        + "\n"
    )
    log(f"documented .env lines {env_lines}, then `up {' '.join(up_args)}`")
    stack = Stack(env_file, web_port, dash_port)
    ok = False
    try:
        clash = [
            n for n in SERVICES if sh(["docker", "ps", "-aq", "--filter", f"name=^{n}$"], check=False).strip()
        ]
        if clash:
            owner = sh(
                [
                    "docker",
                    "inspect",
                    "-f",
                    '{{ index .Config.Labels "com.docker.compose.project" }}',
                    clash[0],
                ],
                check=False,
            ).strip()
            if owner != PROJECT:
                raise DeployTestFailure(
                    f"containers {clash} exist (compose project {owner!r}): not this test's, left alone"
                )
        stack.down(volumes=True)  # a previous interrupted run of this test
        t = time.time()
        log("building images offline (deploy/scripts/build_images.sh)")
        build_env = dict(os.environ)
        wheel_python = other_python()
        if wheel_python:
            build_env["PYTHON"] = wheel_python
            log(f"the wheelhouse is built by {wheel_python} (another version than the image's Python 3.11)")
        proc = subprocess.run(
            ["deploy/scripts/build_images.sh", "--env-file", str(env_file), "-p", PROJECT],
            cwd=REPO,
            env=build_env,
            timeout=2400,
        )
        if proc.returncode != 0:
            raise DeployTestFailure("building the images failed")
        log(f"images ready in {time.time() - t:.0f}s")
        report_images()
        stack.up(*up_args)
        step_1_2(stack)
        step_security(stack)
        step_submissions(stack)
        step_3_kill(stack)
        step_4_restart(stack)
        step_4_receipts(stack)
        step_5_backup_restore(stack)
        ok = True
    except DeployTestFailure as e:
        log(f"FAILED: {e}")
    finally:
        log("cleanup: run containers, compose down -v")
        try:
            stack.down(volumes=True)
            left = leftovers()
            if left:
                log(f"FAILED: left behind after cleanup: {left}")
                ok = False
        except DeployTestFailure as e:
            log(f"FAILED: cleanup: {e}")
            ok = False
        env_file.unlink(missing_ok=True)
        env_file.parent.rmdir()
        if engine is not None:
            stop_engine(engine)
    log(f"{'PASSED' if ok else 'FAILED'} in {time.time() - T0:.0f}s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
