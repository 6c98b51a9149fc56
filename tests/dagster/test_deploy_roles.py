"""deploy/docker/initdb/02_roles.sh on a real PostgreSQL (issue 38): the compose stack's roles, least
privilege. It runs as the image's init script on a new volume and, through create_roles.sh, on the volume
of the previous release, where one superuser owned both databases and every table: the script must take
them over for the roles, be idempotent, and refuse to demote the superuser it runs as."""

import os
import shutil
import subprocess
import uuid

import pytest
from ldtm_dagster_helpers import REPO
from sqlalchemy import create_engine, make_url, text
from sqlalchemy.pool import NullPool

pytestmark = pytest.mark.postgres
SCRIPT = REPO / "deploy/docker/initdb/02_roles.sh"


@pytest.fixture
def previous_release(pg_server_url):
    """Two databases as the previous release left them: owned by the superuser, one table each; and the
    environment the new release's .env gives the postgres container (unique names: roles are cluster-wide)."""
    if not shutil.which("psql"):
        pytest.fail("psql is needed (Debian: postgresql-client)")
    admin = make_url(pg_server_url).set(database="postgres")
    tag = uuid.uuid4().hex[:8]
    env = {
        "POSTGRES_USER": admin.username,
        "PGHOST": admin.host,
        "PGPORT": str(admin.port or 5432),
        "DAGSTER_PG_USERNAME": f"dagster_{tag}",
        "DAGSTER_PG_PASSWORD": "pw-dagster",
        "DAGSTER_PG_DB": f"dagster_db_{tag}",
        "LDTM_PG_APP_DB": f"ldtm_db_{tag}",
        "LDTM_PG_OWNER_ROLE": f"owner_{tag}",
        "LDTM_PG_APP_ROLE": f"app_{tag}",
        "LDTM_PG_READER_ROLE": f"reader_{tag}",
        "LDTM_PG_OWNER_PASSWORD": "pw-owner",
        "LDTM_PG_APP_PASSWORD": "pw-app",
        "LDTM_PG_READER_PASSWORD": "pw-reader",
    }
    engine = create_engine(admin, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        for db in (env["DAGSTER_PG_DB"], env["LDTM_PG_APP_DB"]):
            conn.execute(text(f'CREATE DATABASE "{db}"'))
    for db, table in ((env["DAGSTER_PG_DB"], "runs"), (env["LDTM_PG_APP_DB"], "snapshots")):
        with create_engine(admin.set(database=db)).begin() as conn:
            conn.execute(text(f"CREATE TABLE {table} (id serial PRIMARY KEY, x int)"))
            conn.execute(text(f"CREATE VIEW {table}_v AS SELECT * FROM {table}"))  # noqa: S608 (the test's own names)
    yield env, admin
    with engine.connect() as conn:
        for db in (env["DAGSTER_PG_DB"], env["LDTM_PG_APP_DB"]):
            conn.execute(
                text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = :d"), {"d": db}
            )
            conn.execute(text(f'DROP DATABASE IF EXISTS "{db}"'))
        for key in ("DAGSTER_PG_USERNAME", "LDTM_PG_OWNER_ROLE", "LDTM_PG_APP_ROLE", "LDTM_PG_READER_ROLE"):
            conn.execute(text(f'DROP ROLE IF EXISTS "{env[key]}"'))
        # The script's REVOKE on `postgres` and `template1` is cluster-wide and stays (giving them back here
        # would race the same check in a test beside this one); the tests reach them as the superuser.
    engine.dispose()


def _run(env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT)], env={**os.environ, **env}, capture_output=True, text=True)


def _owners(admin, db: str) -> set:
    with create_engine(admin.set(database=db)).connect() as conn:
        rows = conn.execute(
            text(
                "SELECT tableowner FROM pg_tables WHERE schemaname = 'public' UNION "
                "SELECT viewowner FROM pg_views WHERE schemaname = 'public' UNION "
                "SELECT sequenceowner FROM pg_sequences WHERE schemaname = 'public' UNION "
                "SELECT pg_get_userbyid(datdba) FROM pg_database WHERE datname = current_database()"
            )
        )
        return {r[0] for r in rows}


def _can_connect(admin, role: str, db: str) -> bool:
    with create_engine(admin.set(database="postgres"), isolation_level="AUTOCOMMIT").connect() as conn:
        return conn.execute(
            text("SELECT has_database_privilege(:r, :d, 'CONNECT')"), {"r": role, "d": db}
        ).scalar()


def test_the_roles_take_over_the_previous_releases_databases(previous_release):
    env, admin = previous_release
    for _ in range(2):  # idempotent: an upgrade, then the same again (a restore, a password change)
        out = _run(env)
        assert out.returncode == 0, out.stderr
    dagster, owner, app, reader = (
        env[k]
        for k in ("DAGSTER_PG_USERNAME", "LDTM_PG_OWNER_ROLE", "LDTM_PG_APP_ROLE", "LDTM_PG_READER_ROLE")
    )
    assert _owners(admin, env["DAGSTER_PG_DB"]) == {dagster}
    assert _owners(admin, env["LDTM_PG_APP_DB"]) == {owner}
    with create_engine(admin.set(database="postgres")).connect() as conn:
        rows = conn.execute(
            text(
                "SELECT rolname, rolsuper, rolcreatedb, rolcreaterole, rolpassword IS NOT NULL FROM pg_authid WHERE rolname = ANY(:r)"
            ),
            {"r": [dagster, owner, app, reader]},
        ).all()
    assert sorted(rows) == sorted((r, False, False, False, True) for r in (dagster, owner, app, reader))
    # Each database is reached only by the roles that use it.
    assert _can_connect(admin, app, env["LDTM_PG_APP_DB"]) and _can_connect(
        admin, reader, env["LDTM_PG_APP_DB"]
    )
    assert not _can_connect(admin, app, env["DAGSTER_PG_DB"]) and not _can_connect(
        admin, reader, env["DAGSTER_PG_DB"]
    )
    assert not _can_connect(admin, dagster, env["LDTM_PG_APP_DB"])
    with create_engine(admin.set(database="postgres")).connect() as conn:
        temp = conn.execute(
            text("SELECT has_database_privilege(:r, :d, 'TEMPORARY')"), {"r": app, "d": env["LDTM_PG_APP_DB"]}
        ).scalar()
    assert temp  # price ingest stages rows in a temporary table


def test_the_superuser_is_never_made_dagsters_role(previous_release):
    env, admin = previous_release
    out = _run({**env, "DAGSTER_PG_USERNAME": admin.username})
    assert out.returncode == 1 and "is the superuser" in out.stderr
    with create_engine(admin.set(database="postgres")).connect() as conn:
        assert conn.execute(
            text("SELECT rolsuper FROM pg_roles WHERE rolname = :r"), {"r": admin.username}
        ).scalar()
    assert _owners(admin, env["DAGSTER_PG_DB"]) == {admin.username}  # nothing changed


def test_no_role_reaches_the_maintenance_database_and_the_reader_cannot_block_writers(previous_release):
    """Issue 61, finding 6: the app role could connect to `postgres`; the reader could take the advisory
    locks the chain's writers and the migrations wait on, and hold them as long as it liked."""
    env, admin = previous_release
    assert _run(env).returncode == 0
    owner, app, reader = (env[k] for k in ("LDTM_PG_OWNER_ROLE", "LDTM_PG_APP_ROLE", "LDTM_PG_READER_ROLE"))
    for role in (owner, app, reader, env["DAGSTER_PG_USERNAME"]):
        assert not _can_connect(admin, role, "postgres") and not _can_connect(admin, role, "template1")

    def as_role(role: str, sql: str) -> str:
        # NullPool: the session (and any lock it took) ends with the block, never kept in a pool.
        engine = create_engine(admin.set(database=env["LDTM_PG_APP_DB"]), poolclass=NullPool)
        with engine.connect() as conn:
            conn.execute(text(f'SET ROLE "{role}"'))
            try:
                conn.execute(text(sql))
                return "allowed"
            except Exception as exc:  # noqa: BLE001 - the server's refusal is the answer
                return "denied" if "permission denied" in str(exc) else str(exc)

    # The try- forms never wait, and keys of this test's own: nothing of another test is ever blocked.
    key = int(uuid.uuid4().int % 2**31)
    for lock in (f"pg_try_advisory_lock({key})", f"pg_try_advisory_xact_lock({key})", f"pg_try_advisory_lock_shared({key}, 2)"):  # fmt: skip
        assert as_role(reader, f"SELECT {lock}") == "denied", lock
        assert as_role(app, f"SELECT {lock}") == "allowed", lock
        assert as_role(owner, f"SELECT {lock}") == "allowed", lock
    with create_engine(admin.set(database="postgres")).connect() as conn:
        settings = conn.execute(
            text("SELECT unnest(setconfig) FROM pg_db_role_setting s JOIN pg_roles r ON r.oid = s.setrole "
                 "WHERE r.rolname = :r"),
            {"r": reader},
        ).scalars().all()  # fmt: skip
    assert {s.split("=")[0] for s in settings} >= {
        "statement_timeout",
        "lock_timeout",
        "idle_in_transaction_session_timeout",
    }
