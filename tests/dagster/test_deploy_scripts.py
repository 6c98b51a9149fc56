"""The deploy scripts' own logic, with stand-ins for `docker` and the host's pip (no engine, no network):
the wheelhouse is chosen for the image's Python and refuses CUDA wheels in a CPU build; the backup fails
loudly when it dumps nothing; the build context, the healthchecks and the documented offline recipe.
The real thing runs in `make deploy-test` (deploy/test/deploy_test.py)."""

from __future__ import annotations

import fnmatch
import gzip
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from ldtm_dagster_helpers import REPO

SCRIPTS = REPO / "deploy/scripts"
COMPOSE = yaml.safe_load((REPO / "docker-compose.yml").read_text())

# `docker`: the image's python3 answers FAKE_IMAGE_PY; the wheelhouse check in the image fails with
# FAKE_VERIFY_FAIL the first time; `docker exec … pg_dumpall` prints FAKE_DUMP (a file) and exits
# FAKE_DUMP_RC; `docker inspect` says the container runs; `docker run … tar` writes the archive.
FAKE_DOCKER = r"""#!/usr/bin/env bash
printf '%s\n' "$*" >>"$FAKE_DIR/docker.calls"
case "$*" in
*"--entrypoint python3"*) echo "$FAKE_IMAGE_PY" ;;
*"pip install -q --dry-run"*)
    if [[ -n ${FAKE_VERIFY_FAIL:-} && ! -f $FAKE_DIR/verified ]]; then
        touch "$FAKE_DIR/verified"
        echo "ERROR: No matching distribution found for $FAKE_VERIFY_FAIL" >&2
        exit 1
    fi ;;
inspect*) echo true ;;
*pg_dumpall*) cat "$FAKE_DUMP"; exit "${FAKE_DUMP_RC:-0}" ;;
run*tar*) out=$(sed -n 's/.*-v \([^ ]*\):\/b.*/\1/p' <<<"$*"); name=$(sed -n 's/.*-czf \/b\/\([^ ]*\).*/\1/p' <<<"$*")
    echo archive >"$out/$name" ;;
esac
"""

# The host's python: `-m pip …` is recorded (one call a line) and fakes its downloads; anything else runs.
FAKE_PYTHON = r"""#!/usr/bin/env bash
if [[ $1 == -m && $2 == pip ]]; then
    printf '%s\n' "${*:3}" >>"$FAKE_DIR/pip.calls"
    dest=$(sed -n 's/.*--\(dest\|wheel-dir\) \([^ ]*\).*/\2/p' <<<"$*")
    mkdir -p "$dest"
    if [[ " $* " == *" --no-deps "* ]]; then
        touch "$dest/torch-2.13.0+cpu-$FAKE_ABI-$FAKE_ABI-manylinux_2_28_x86_64.whl"
    elif [[ -n ${FAKE_CUDA:-} ]]; then
        touch "$dest/nvidia_cublas_cu12-12.8.4.1-py3-none-manylinux_2_27_x86_64.whl"
    fi
    touch "$dest/nvidia_ml_py-13.615.71-py3-none-any.whl"
    exit 0
fi
exec "$REAL_PYTHON" "$@"
"""

IMAGE_312 = "3.12 cp312 manylinux_2_36_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 linux_x86_64"
IMAGE_311 = "3.11 cp311 manylinux_2_36_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 linux_x86_64"


@pytest.fixture
def fakes(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("docker", FAKE_DOCKER), ("python", FAKE_PYTHON)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "FAKE_DIR": str(tmp_path),
        "REAL_PYTHON": sys.executable,
        "PYTHON": str(bin_dir / "python"),
        "LDTM_DEPLOY_CACHE": str(tmp_path / "cache"),
        "LDTM_BASE_IMAGE": "ldtm-base:test",
    }
    for name in ("TORCH_INDEX", "TORCH_SPEC", "PIP_INDEX_URL"):
        env.pop(name, None)
    return env


def _wheelhouse(env, image_py, **extra):
    abi = image_py.split()[1]
    env = {**env, "FAKE_IMAGE_PY": image_py, "FAKE_ABI": abi, **extra}
    return subprocess.run(
        [str(SCRIPTS / "build_wheelhouse.sh")], env=env, capture_output=True, text=True, timeout=120
    )


def _calls(tmp_path, name):
    path = tmp_path / f"{name}.calls"
    return path.read_text().splitlines() if path.exists() else []


def test_the_wheelhouse_is_for_the_images_python_not_the_hosts(fakes, tmp_path):
    host = f"{sys.version_info[0]}.{sys.version_info[1]}"
    assert host != "3.12"  # the stand-in image's Python differs from the interpreter running pip
    p = _wheelhouse(fakes, IMAGE_312)
    assert p.returncode == 0, p.stderr
    wheelhouse = Path(p.stdout.strip())
    assert wheelhouse.name.startswith("wheelhouse-py3.12-") and (wheelhouse / ".complete").exists()
    pip = _calls(tmp_path, "pip")
    assert pip and all(c.startswith("download ") for c in pip), pip
    for call in pip:
        # The image's interpreter, ABI and every platform it accepts; binaries only (no host builds).
        assert "--python-version 3.12 --implementation cp --abi cp312" in call
        assert "--only-binary=:all:" in call
        platforms = re.findall(r"--platform (\S+)", call)
        assert platforms == IMAGE_312.split()[2:]
    torch, rest = pip[0], pip[1]
    # torch alone from pytorch's CPU index; the rest takes that very wheel, so no CUDA build sneaks in.
    assert "--no-deps --index-url https://download.pytorch.org/whl/cpu" in torch and "torch==2.13.0" in torch
    assert "torch-2.13.0+cpu-cp312-cp312" in rest and "dagster-graphql" in rest
    # The image's own pip resolves the requirements offline against the wheelhouse.
    [verify] = [c for c in _calls(tmp_path, "docker") if "--dry-run" in c]
    assert "--network none" in verify and "--no-index" in verify and "ldtm-base:test" in verify

    # The cache key follows the image's Python: a 3.11 image gets its own wheelhouse.
    p311 = _wheelhouse(fakes, IMAGE_311)
    assert p311.returncode == 0, p311.stderr
    assert Path(p311.stdout.strip()).name.startswith("wheelhouse-py3.11-")
    assert Path(p311.stdout.strip()) != wheelhouse
    assert "--python-version 3.11" in _calls(tmp_path, "pip")[-1]
    # Up to date: a second run downloads nothing.
    before = len(_calls(tmp_path, "pip"))
    again = _wheelhouse(fakes, IMAGE_311)
    assert again.returncode == 0 and again.stdout == p311.stdout and len(_calls(tmp_path, "pip")) == before


def test_a_cpu_wheelhouse_with_cuda_wheels_is_refused(fakes, tmp_path):
    p = _wheelhouse(fakes, IMAGE_311, FAKE_CUDA="1")
    assert p.returncode != 0
    assert "CUDA wheels" in p.stderr and "nvidia_cublas_cu12" in p.stderr
    assert "nvidia_ml_py" not in p.stderr.split("CUDA wheels")[1].split(")")[0]  # NVML bindings are fine
    assert not list((tmp_path / "cache").glob("wheelhouse-*/.complete"))


def test_a_dependency_the_hosts_markers_left_out_is_downloaded_for_the_image(fakes, tmp_path):
    # The host's pip evaluates environment markers for the host's Python; the image's pip names the gap.
    p = _wheelhouse(fakes, IMAGE_311, FAKE_VERIFY_FAIL="tomli>=1.1.0")
    assert p.returncode == 0, p.stderr
    assert "also needs tomli>=1.1.0" in p.stderr
    last = _calls(tmp_path, "pip")[-1]
    assert last.endswith("tomli>=1.1.0") and "--python-version 3.11" in last
    assert len([c for c in _calls(tmp_path, "docker") if "--dry-run" in c]) == 2


def test_the_dry_run_names_the_target_and_downloads_nothing(fakes, tmp_path):
    p = subprocess.run(
        [str(SCRIPTS / "build_wheelhouse.sh"), "--dry-run"],
        env={**fakes, "FAKE_IMAGE_PY": IMAGE_312, "FAKE_ABI": "cp312"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 0, p.stderr
    assert "image python: 3.12 cp312" in p.stdout and "--python-version 3.12" in p.stdout
    assert not _calls(tmp_path, "pip")


def _dump(tmp_path, text: str) -> Path:
    path = tmp_path / "dump.sql"
    path.write_text(text)
    return path


COMPLETE_DUMP = (
    "--\n-- PostgreSQL database cluster dump\n--\nCREATE ROLE ldtm;\n"
    'CREATE DATABASE ldtm WITH TEMPLATE = template0 ENCODING = "UTF8";\n\\connect ldtm\n'
    "CREATE TABLE prices (x int);\n--\n-- PostgreSQL database cluster dump complete\n--\n"
)


def _backup(fakes, tmp_path, dump: Path, rc: int = 0):
    env = {**fakes, "FAKE_DUMP": str(dump), "FAKE_DUMP_RC": str(rc)}
    out = tmp_path / "backup"
    p = subprocess.run(
        [str(SCRIPTS / "backup.sh"), str(out)], env=env, capture_output=True, text=True, timeout=60
    )
    return p, out


def test_a_backup_that_dumps_nothing_fails_loudly(fakes, tmp_path):
    p, out = _backup(fakes, tmp_path, _dump(tmp_path, ""))
    assert p.returncode != 0 and "backup FAILED" in p.stderr and "empty" in p.stderr
    assert not (out / "postgres.sql.gz").exists()


def test_a_failing_pg_dumpall_fails_the_backup(fakes, tmp_path):
    # The documented one-liner exited 0 here: `role "root" does not exist` went to stderr, gzip succeeded.
    p, out = _backup(fakes, tmp_path, _dump(tmp_path, COMPLETE_DUMP[:60]), rc=1)
    assert p.returncode != 0 and "pg_dumpall" in p.stderr
    assert not list(out.glob("postgres.sql.gz*"))


def test_a_dump_cut_short_or_without_the_app_database_fails(fakes, tmp_path):
    p, out = _backup(fakes, tmp_path, _dump(tmp_path, COMPLETE_DUMP.rsplit("--\n-- PostgreSQL", 1)[0]))
    assert p.returncode != 0 and "cut short" in p.stderr
    no_app = COMPLETE_DUMP.replace("\\connect ldtm", "\\connect dagster")
    p, out = _backup(fakes, tmp_path, _dump(tmp_path, no_app))
    assert p.returncode != 0 and "ldtm" in p.stderr
    # Issue 38 D10: a dump holding `ldtm_old` and no `ldtm` passed (a substring match).
    only_old = COMPLETE_DUMP.replace("ldtm", "ldtm_old")
    p, out = _backup(fakes, tmp_path, _dump(tmp_path, only_old))
    assert p.returncode != 0 and "has no database 'ldtm'" in p.stderr


def test_a_complete_backup_is_kept_with_the_credentials_of_the_container(fakes, tmp_path):
    p, out = _backup(fakes, tmp_path, _dump(tmp_path, COMPLETE_DUMP))
    assert p.returncode == 0, p.stderr
    assert gzip.decompress((out / "postgres.sql.gz").read_bytes()).decode() == COMPLETE_DUMP
    assert (out / "artifacts.tgz").exists() and (out / "receipts.tgz").exists()
    assert sorted(c.split(" -v ")[1].split(":")[0] for c in _calls(tmp_path, "docker") if "tar -C" in c) == [
        "ldtm_artifacts",
        "ldtm_receipts",
    ]
    # Issue 38: backups were world-readable; the dump carries every table and the roles' password hashes.
    for path in (out, out / "postgres.sql.gz", out / "artifacts.tgz", out / "receipts.tgz"):
        assert path.stat().st_mode & 0o077 == 0, path
    [dump_call] = [c for c in _calls(tmp_path, "docker") if "pg_dumpall" in c]
    # No TTY (no -t), and the user is the container's POSTGRES_USER, not the operator's shell variable.
    assert dump_call.startswith("exec ldtm_postgres ") and " -t" not in dump_call
    assert '"$POSTGRES_USER"' in dump_call


def _ignored(patterns: list[str], path: str) -> bool:
    """Docker's .dockerignore rule: the last pattern matching the path or one of its parents decides."""
    parts = path.split("/")
    result = False
    for pattern in patterns:
        negate = pattern.startswith("!")
        pat = pattern.lstrip("!")
        candidates = ["/".join(parts[: i + 1]) for i in range(len(parts))]
        if pat.startswith("**/"):
            hit = any(fnmatch.fnmatch(part, pat[3:]) for part in parts)
        else:
            hit = any(fnmatch.fnmatch(c, pat) for c in candidates)
        if hit:
            result = not negate
    return result


def test_the_build_context_carries_what_the_dockerfiles_copy_and_nothing_else():
    patterns = [
        line.strip()
        for line in (REPO / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    sources = set()
    for dockerfile in REPO.glob("deploy/Dockerfile.*"):
        for line in dockerfile.read_text().splitlines():
            if line.startswith("COPY ") and "--from=" not in line:
                for src in line.split()[1:-1]:
                    sources.add(src.replace("${WHEELHOUSE}", "deploy/wheelhouse").rstrip("/"))
    for src in sources:
        assert not _ignored(patterns, src), f"COPY {src} is left out of the build context"
    assert not _ignored(patterns, "deploy/wheelhouse/torch-2.13.0+cpu-cp311-cp311-linux.whl")
    # An edit of the folder's README must not invalidate the builder stage (a full pip install).
    assert _ignored(patterns, "deploy/wheelhouse/README.md")
    for path in (
        ".venv/lib/x.py",
        ".ldtm/ldtm.db",
        ".dagster_home/dagster.yaml",
        ".git/HEAD",
        "tests/t.py",
        "ldtm_core/__pycache__/x.pyc",
        "docs/operations.md",
        ".env",
        "benchmarks/b.py",
    ):
        assert _ignored(patterns, path), f"{path} would be sent with every build"


def test_published_ports_listen_on_localhost_unless_the_operator_opens_them():
    # Issue 38 item 1: the Dagster UI and the dashboard were published on 0.0.0.0 without authentication.
    published = {
        name: port for name, service in COMPOSE["services"].items() for port in service.get("ports", [])
    }
    assert set(published) == {"ldtm_proxy"}  # the UI and the dashboard, behind its password
    for name, port in published.items():
        assert port.startswith("${LDTM_BIND_ADDRESS:-127.0.0.1}:"), (name, port)


def test_every_service_has_a_healthcheck():
    # The docs promise "all healthy" in `compose ps`.
    for name, service in COMPOSE["services"].items():
        assert "healthcheck" in service or service.get("restart") == "no", name  # one-shot: ldtm_migrate
    # The daemon's: its heartbeats, read with psycopg2 alone (a check that imports Dagster took > 25 s
    # under load and showed a working daemon as unhealthy).
    daemon = COMPOSE["services"]["ldtm_daemon"]["healthcheck"]["test"]
    assert daemon[:3] == ["CMD", "python3", "-c"] and "daemon_heartbeats" in daemon[3]
    assert "import dagster" not in daemon[3] and "$" not in daemon[3]  # compose would interpolate `$`
    compile(daemon[3], "healthcheck", "exec")
    assert "/_stcore/health" in " ".join(COMPOSE["services"]["ldtm_dashboard"]["healthcheck"]["test"])
    assert COMPOSE["services"]["ldtm_dashboard"]["environment"]["LDTM_DEPLOYMENT"] == "docker"


def _deploy_test_module():
    spec = importlib.util.spec_from_file_location("deploy_test", REPO / "deploy/test/deploy_test.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_offline_recipe_names_the_local_images_and_what_the_host_needs():
    env_lines, up_args = _deploy_test_module().documented_offline_recipe()
    assert sorted(line.split("=")[0] for line in env_lines) == [
        "LDTM_BASE_IMAGE",
        "LDTM_POSTGRES_IMAGE",
        "LDTM_PROXY_IMAGE",
    ]
    assert up_args[:1] == ["-d"]
    # Each documented value is the image the scripts build (lib.sh's defaults).
    lib = (SCRIPTS / "lib.sh").read_text()
    for line in env_lines:
        name, value = line.split("=", 1)
        assert f"{name}=${{{name}:-{value}}}" in lib
    example = (REPO / "deploy/docker/env.example").read_text()
    for line in env_lines:
        assert f"# {line}" in example
    docs = (REPO / "docs/operations.md").read_text()
    section = docs.split("### A host with no image registry", 1)[1].split("\n### ", 1)[0]
    for needed in ("install_prerequisites.sh", "debootstrap", "root", "docker-compose", "docker compose"):
        assert needed in section, needed
    assert "reach no image registry or package index" not in docs
    assert 'pg_dumpall -U "$DAGSTER_PG_USERNAME"' not in docs  # the backup that wrote an empty file
