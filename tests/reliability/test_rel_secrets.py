"""Secrets: a database password never shows in CLI output, errors, logs or run_log rows; deployment
files take credentials only from the environment or a git-ignored env file."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml
from rel_helpers import REPO, build_world, cli_env, run_cli
from sqlalchemy import select, text
from sqlalchemy.engine import make_url

from ldtm_core.db import get_engine
from ldtm_core.schema import metadata

PASSWORD = "S3cretPw_d0NotLeak"
COMMANDS = [
    ["db", "upgrade"],
    ["predict", "--run-date", "2024-05-01"],
    ["fillback"],
    ["leaderboard"],
    ["audit", "verify"],
    ["ingest", "synthetic", "-t", "1", "--start", "2024-01-02", "--end", "2024-02-01"],
    ["train", "-t", "AAPL", "-p", "demo", "--set", "max_epochs=1"],
]

pytestmark = pytest.mark.timeout(240)


@pytest.mark.slow
def test_closed_port_url_errors_are_clear_and_masked(tmp_path):
    url = f"postgresql+psycopg2://ldtm:{PASSWORD}@127.0.0.1:1/ldtm"
    env = cli_env(tmp_path / "home", url)
    for cmd in COMMANDS:
        r = run_cli(cmd, env, timeout=60)
        both = r.stdout + r.stderr
        assert r.returncode != 0, (cmd, both)
        assert PASSWORD not in both, (cmd, both)
        assert "Traceback" not in both, (cmd, both)
        assert "error:" in both and "127.0.0.1" in both, (cmd, both)


@pytest.mark.slow
def test_real_server_url_with_a_password_never_echoes_it(pg_url, tmp_path):
    # The local server trusts 127.0.0.1, so a (wrong) password still connects: the runs really work.
    url = make_url(pg_url).set(username="postgres", password=PASSWORD).render_as_string(hide_password=False)
    home = tmp_path / "home"
    build_world(pg_url, home, tickers=["AAPL"])
    env = cli_env(home, url)
    outputs = []
    for cmd in COMMANDS:
        r = run_cli(cmd, env, timeout=120)
        outputs.append(r.stdout + r.stderr)
        assert PASSWORD not in outputs[-1], (cmd, outputs[-1])
    assert "***" in outputs[0]  # db upgrade shows the masked URL
    # No stored text anywhere (run_log messages, summaries, registry events...) holds it either.
    engine = get_engine(pg_url)
    with engine.connect() as conn:
        for table in metadata.sorted_tables:
            for row in conn.execute(select(table)):
                assert PASSWORD not in repr(tuple(row)), table.name
        views = conn.execute(text("SELECT count(*) FROM run_log")).scalar_one()
    assert views >= 1


def test_deployment_files_take_credentials_only_from_the_environment():
    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    dagster_yaml = (REPO / "dagster.yaml").read_text()

    def walk(node, path=""):
        if isinstance(node, dict):
            for k, v in node.items():
                yield from walk(v, f"{path}.{k}")
        elif isinstance(node, list):
            for i, v in enumerate(node):
                yield from walk(v, f"{path}[{i}]")
        else:
            yield path, node

    for where, value in walk(compose):
        if re.search(r"pass|secret|token", where, re.I):
            assert isinstance(value, str) and value.startswith("${"), (where, value)
        if isinstance(value, str) and "://" in value and "@" in value:
            creds = value.split("://", 1)[1].split("@", 1)[0]
            # The role may be named (ldtm_app, ldtm_reader: not secrets); its password never is.
            user, _, password = creds.partition(":")
            assert password.startswith("${") and re.fullmatch(r"\w+|\$\{\w+\}", user), (where, value)
    for line in dagster_yaml.splitlines():
        if re.search(r"password", line, re.I) and not line.lstrip().startswith("#"):
            assert "env:" in line or "${" in line, line
    ignored = subprocess.run(["git", "check-ignore", "-q", ".env"], cwd=REPO).returncode
    assert ignored == 0, ".env must be git-ignored"
    for extra in (REPO / "deploy").rglob("*"):
        if extra.is_file() and extra.suffix in {".yaml", ".yml"}:
            for line in extra.read_text().splitlines():
                if re.search(r"password:\s*\S", line, re.I) and not line.lstrip().startswith("#"):
                    assert "env" in line or "${" in line, (extra, line)
    assert not Path(REPO / ".env").exists() or ignored == 0
