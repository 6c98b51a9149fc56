"""First-use migration: concurrent first commands on a fresh database all succeed (issue 10)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from sqlalchemy import create_engine, inspect, text
from sqlalchemy.engine import make_url

from ldtm_core.db import get_engine
from ldtm_core.migrate import current_revision, head_revision
from ldtm_core.schema import metadata

REPO = Path(__file__).resolve().parents[1]
# Each process imports first, then waits for the same instant, so the migrations really overlap.
RACER = """
import sys, time
from ldtm_core.migrate import upgrade, current_revision
go = float(sys.argv[2])
time.sleep(max(0.0, go - time.time()))
upgrade(sys.argv[1])
print(current_revision(sys.argv[1]))
"""


def _race(url: str, n: int) -> list[subprocess.CompletedProcess]:
    go = time.time() + 4.0  # after every interpreter has imported alembic and sqlalchemy
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", RACER, url, str(go)],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(n)
    ]
    out = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=120)
        out.append(subprocess.CompletedProcess(p.args, p.returncode, stdout, stderr))
    return out


def _assert_all_migrated(url: str, results: list[subprocess.CompletedProcess]) -> None:
    for r in results:
        assert r.returncode == 0, r.stderr[-2000:]
        assert r.stdout.strip() == head_revision(), r.stdout
    names = set(inspect(get_engine(url)).get_table_names())
    assert {t.name for t in metadata.sorted_tables} <= names
    assert current_revision(url) == head_revision()


def test_concurrent_first_migrations_on_a_fresh_sqlite_file_all_succeed(tmp_path):
    for trial in range(2):
        url = f"sqlite:///{tmp_path / f'trial{trial}' / 'ldtm.db'}"
        (tmp_path / f"trial{trial}").mkdir()
        _assert_all_migrated(url, _race(url, 3))


@pytest.mark.postgres
def test_concurrent_first_migrations_on_a_fresh_postgres_database_all_succeed(pg_server_url):
    admin = create_engine(make_url(pg_server_url).set(database="postgres"), isolation_level="AUTOCOMMIT")
    name = f"ldtm_test_migrate_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    url = make_url(pg_server_url).set(database=name).render_as_string(hide_password=False)
    try:
        _assert_all_migrated(url, _race(url, 3))
    finally:
        get_engine(url).dispose()
        get_engine.cache_clear()
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def test_two_first_cli_ingests_on_a_fresh_sqlite_home_both_succeed(tmp_path):
    """What the user ran: two `ldtm ingest csv` at once on a home that does not exist yet."""
    from test_ingest import frame, write_csv, yahoo

    home = tmp_path / "home"
    files = []
    for ticker in ("AAPL", "NVDA"):
        path = tmp_path / f"{ticker}.csv"
        write_csv(path, yahoo(frame(ticker, n=15)))
        files.append(path)
    env = {**os.environ, "LDTM_HOME": str(home), "LDTM_UNIVERSE": "demo"}
    env.pop("LDTM_DATABASE_URL", None)
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "ldtm_core", "ingest", "csv", str(f)],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for f in files
    ]
    for p in procs:
        _, stderr = p.communicate(timeout=120)
        assert p.returncode == 0, stderr[-2000:]
    with get_engine(f"sqlite:///{home / 'ldtm.db'}").connect() as conn:
        counts = dict(conn.execute(text("SELECT ticker, COUNT(*) FROM prices GROUP BY ticker")).all())
    assert counts == {"AAPL": 15, "NVDA": 15}


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_a_database_newer_than_the_code_is_one_clear_error(tmp_path, backend, request):
    # Issue 38 D7: a database one revision newer than the code gave a 102-line alembic traceback.
    from ldtm_core.db import DatabaseError
    from ldtm_core.migrate import upgrade

    url = f"sqlite:///{tmp_path / 'ldtm.db'}" if backend == "sqlite" else request.getfixturevalue("pg_url")
    engine = upgrade(url)
    head = current_revision(url)
    with engine.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = '9999_from_a_later_release'"))
    with pytest.raises(
        DatabaseError,
        match=rf"revision 9999_from_a_later_release.* newer than this code \(its newest: {head}\)",
    ):
        upgrade(url)
    r = subprocess.run(
        [sys.executable, "-m", "ldtm_core", "prices", "summary"],
        env={**os.environ, "LDTM_DATABASE_URL": url, "LDTM_HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode != 0 and "newer than this code" in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) <= 3
    with engine.begin() as conn:  # nothing was changed
        assert (
            conn.execute(text("SELECT version_num FROM alembic_version")).scalar()
            == "9999_from_a_later_release"
        )
        conn.execute(text("UPDATE alembic_version SET version_num = :v"), {"v": head})


def test_db_upgrade_says_what_it_changes_and_dry_run_changes_nothing(tmp_path):
    # Issue 38: `ldtm db upgrade` said nothing of what changes (tie re-scoring, fold keys, legacy shadows).
    from typer.testing import CliRunner

    from ldtm_core.cli import app
    from ldtm_core.migrate import upgrade

    url = f"sqlite:///{tmp_path / 'ldtm.db'}"
    upgrade(url, "0026")
    env = {"LDTM_DATABASE_URL": url, "LDTM_HOME": str(tmp_path)}
    runner = CliRunner()
    dry = runner.invoke(app, ["db", "upgrade", "--dry-run"], env=env)
    assert dry.exit_code == 0, dry.output
    for revision, words in (
        ("0027", "shadow_designs"),
        ("0028", "ix_snapshots_ticker_id"),
        ("0030", "fillfactor"),
    ):
        assert revision in dry.output and words in dry.output
    assert "nothing was changed" in dry.output and current_revision(url) == "0026"
    real = runner.invoke(app, ["db", "upgrade"], env=env)
    assert real.exit_code == 0 and "0027" in real.output and "shadow_designs" in real.output
    head = current_revision(url)
    assert head != "0026" and f"at revision {head}" in real.output
    again = runner.invoke(app, ["db", "upgrade", "--dry-run"], env=env)
    assert "already at the newest revision" in again.output
