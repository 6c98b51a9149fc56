"""Shared fixtures: a fresh migrated database per test on SQLite, and on a real PostgreSQL.

PostgreSQL: one fresh database per test session (created here, dropped at the end), emptied
between tests. The server is named by LDTM_TEST_POSTGRES_URL (any database on it; we create our
own). When it is set, or LDTM_REQUIRE_POSTGRES=1 (.ci/run sets both), an unreachable server fails the
tests instead of skipping them; unset, on a machine without PostgreSQL, they skip.
"""

from __future__ import annotations

import os
import shutil
import sys
import uuid
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

# The product serves the 103-ticker `full` universe by default; the tests choose the small `demo` one
# explicitly, before any module (the Dagster partitions) reads it at import.
os.environ["LDTM_UNIVERSE"] = "demo"
# `amp=auto` trains in fp32 on CPUs without AMX whatever the CI machine's core: no bf16 probe (and no
# cache file written under ~/.cache) unless a test asks for it (tests/learning/test_precision.py).
os.environ["LDTM_BF16_PROBE"] = "0"
# Global recipes' fits in-process: a child per fit (the default, an hour's budget) costs ~1.5 s to start,
# minutes over the suite's fold fits; tests/learning/test_your_recipe.py runs the default.
os.environ["LDTM_RECIPE_FIT_TIMEOUT_S"] = "0"
# pytest-xdist's workers inherit COLUMNS=80 from their launcher: the CLI's console (built at import) would
# then wrap its tables at 80 columns in some workers only. Output is piped in every test, as in CI.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.pop("COLUMNS", None)

# A few tests import helpers from another test module (`from test_leaderboard import _row`); the test
# folders mirror the core, so each is on the path as the one flat folder was (test names are unique).
sys.path[1:1] = sorted({str(p.parent) for p in Path(__file__).parent.rglob("test_*.py")} - set(sys.path))

from ldtm_core.db import get_engine  # noqa: E402
from ldtm_core.migrate import head_revision, upgrade  # noqa: E402
from ldtm_core.schema import metadata  # noqa: E402

HEAD = head_revision()
DEFAULT_PG = "postgresql+psycopg2://postgres@127.0.0.1:5432/postgres"


def postgres_required() -> bool:
    """Configured (LDTM_TEST_POSTGRES_URL) or required (LDTM_REQUIRE_POSTGRES=1): then a PostgreSQL test
    that cannot reach its server fails instead of skipping."""
    return os.environ.get("LDTM_REQUIRE_POSTGRES") == "1" or bool(os.environ.get("LDTM_TEST_POSTGRES_URL"))


def _admin_url() -> str:
    return os.environ.get("LDTM_TEST_POSTGRES_URL", DEFAULT_PG)


@pytest.fixture(scope="session")
def pg_server_url():
    """URL of a fresh database on the test server, dropped after the session."""
    admin = make_url(_admin_url()).set(database="postgres")
    name = f"ldtm_test_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    try:
        admin_engine = create_engine(
            admin, isolation_level="AUTOCOMMIT", pool_pre_ping=True
        )  # survives a restart
        with admin_engine.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
    except Exception as exc:  # noqa: BLE001
        if postgres_required():
            pytest.fail(f"PostgreSQL required but unreachable at {admin.render_as_string()}: {exc}")
        pytest.skip(f"PostgreSQL unreachable: {exc}")
    url = admin.set(database=name).render_as_string(hide_password=False)
    yield url
    get_engine.cache_clear()
    with admin_engine.connect() as conn:
        conn.execute(
            text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = :n"), {"n": name}
        )
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}"'))
    admin_engine.dispose()


def _empty_tables(url: str) -> None:
    """Every table emptied and every id sequence restarted, as a fresh database has them. Only the tables
    that hold a row are truncated: a TRUNCATE of all of them costs 0.15 s a test, finding none 1 ms."""
    names = [t.name for t in metadata.sorted_tables]
    with get_engine(url).begin() as conn:
        # Names from the schema's metadata, not input.
        holding = " UNION ALL ".join(f"(SELECT '{name}' FROM {name} LIMIT 1)" for name in names)  # noqa: S608
        used = [row[0] for row in conn.execute(text(holding))]
        if used:
            conn.execute(text(f"TRUNCATE {', '.join(used)} RESTART IDENTITY CASCADE"))
        moved = "SELECT schemaname, sequencename FROM pg_sequences WHERE last_value IS NOT NULL"
        for schema, sequence in conn.execute(text(moved)).all():
            conn.execute(text(f'ALTER SEQUENCE "{schema}"."{sequence}" RESTART'))


@pytest.fixture(scope="session")
def _sqlite_template(tmp_path_factory) -> Path:
    """One SQLite file migrated to the newest revision per worker: each test gets a copy of it instead of
    running every migration again (0.2 s a test, about a thousand tests)."""
    path = tmp_path_factory.mktemp("sqlite_template") / "ldtm.db"
    engine = upgrade(f"sqlite:///{path}")
    with engine.connect() as conn:
        conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")  # everything in the main file
    engine.dispose()
    return path


def _migrated_sqlite(template: Path, folder: Path) -> str:
    """A fresh migrated SQLite database in `folder`: a copy of the session's template."""
    shutil.copyfile(template, folder / "ldtm.db")
    return f"sqlite:///{folder / 'ldtm.db'}"


@pytest.fixture(scope="session")
def _pg_migrated(pg_server_url) -> str:
    """The session's PostgreSQL database, migrated once."""
    upgrade(pg_server_url)
    return pg_server_url


def _empty_pg(url: str) -> str:
    """The session's PostgreSQL database at the newest revision (a test that moved it is put back) with
    every table emptied."""
    with get_engine(url).connect() as conn:
        revision = conn.execute(text("SELECT max(version_num) FROM alembic_version")).scalar()
    if revision != HEAD:
        upgrade(url)
    _empty_tables(url)
    return url


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db_url(request, tmp_path, _sqlite_template):
    """A migrated, empty database: run once on SQLite and once on PostgreSQL."""
    if request.param == "sqlite":
        return _migrated_sqlite(_sqlite_template, tmp_path)
    return _empty_pg(request.getfixturevalue("_pg_migrated"))


@pytest.fixture
def sqlite_url(tmp_path, _sqlite_template):
    return _migrated_sqlite(_sqlite_template, tmp_path)


@pytest.fixture
def pg_url(_pg_migrated):
    return _empty_pg(_pg_migrated)


@pytest.fixture
def engine(db_url):
    return get_engine(db_url)


@pytest.fixture
def ldtm_env(tmp_path, monkeypatch, db_url):
    """Environment for CLI/end-to-end tests: LDTM_HOME in tmp, database from `db_url`."""
    home = tmp_path / "home"
    monkeypatch.setenv("LDTM_HOME", str(home))
    monkeypatch.setenv("LDTM_DATABASE_URL", db_url)
    monkeypatch.setenv("LDTM_UNIVERSE", "demo")
    monkeypatch.delenv("LDTM_NOTIFY_WEBHOOK_URL", raising=False)
    return {"home": home, "url": db_url}


PG_FIXTURES = {"pg_url", "pg_server_url"}


def pytest_collection_modifyitems(items):
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        if PG_FIXTURES & set(getattr(item, "fixturenames", ())) or "postgres" in params.values():
            item.add_marker(pytest.mark.postgres)
    # The longest tests first: the workers then end together on short ones (with `--dist worksteal`)
    # instead of one waiting for the other's last long test. A stable sort: the rest keep their order.
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.skipped and item.get_closest_marker("postgres") and postgres_required():
        report.outcome = "failed"
        report.longrepr = (
            f"{item.nodeid}: a PostgreSQL test was skipped while a PostgreSQL server is configured"
        )


@pytest.fixture(autouse=True)
def _restore_main_module():
    """Streamlit's script runner installs each page it runs as `sys.modules["__main__"]` and leaves it
    there; multiprocessing's spawn (Dagster's multiprocess executor, the training pools) would then re-run
    that page in every process a later test starts in the same worker. Any test may run a page (the shadow
    tests do), so the real `__main__` is put back after every test."""
    main = sys.modules["__main__"]
    yield
    sys.modules["__main__"] = main
