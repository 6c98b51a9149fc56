"""Least-privilege roles on a real PostgreSQL (issue 38): an owner that migrates, an application role
that writes rows but runs no DDL and never rewrites or deletes the record, a read-only reader.

Each test gets its own roles (cluster-wide, so uniquely named and dropped after) and its own database,
owned by the owner role and migrated by it, as in the compose deployment. Roles log in with a password
in the URL: that works under trust and password authentication alike.
"""

from __future__ import annotations

import datetime as dt
import uuid
from dataclasses import dataclass

import pytest
from accountability_helpers import (
    add_backtest,
    ingest,
    make_model,
    make_settings,
    refill_next_day,
    registry_row,
    snapshot_row,
)
from sqlalchemy import create_engine, delete, insert, select, text, update
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ProgrammingError
from typer.testing import CliRunner

from ldtm_core import db_roles
from ldtm_core.accountability.gate.gate import GateThresholds, run_gate
from ldtm_core.accountability.ledger.audit import verify
from ldtm_core.accountability.ledger.chain import AUDIT_KEY_ENV
from ldtm_core.accountability.ledger.fillback import fillback
from ldtm_core.accountability.ledger.refill import refill
from ldtm_core.accountability.ledger.snapshots import predict
from ldtm_core.cli import app as cli
from ldtm_core.data.corporate_actions import Action, record_actions
from ldtm_core.data.ingest import ingest_frame
from ldtm_core.db import get_engine
from ldtm_core.errors import ConfigError, InputError
from ldtm_core.horizons import HORIZONS
from ldtm_core.learning import registry
from ldtm_core.migrate import upgrade
from ldtm_core.schema import metadata, prices, run_log, snapshots

DENIED = "permission denied|must be owner"


@dataclass
class Cluster:
    """One test's roles and database; `url(role)` connects as that role."""

    admin: object
    database: str
    owner: str
    app: str
    reader: str
    password: str

    def url(self, role: str) -> str:
        """As `role`; the server's own user (a superuser) with its own password."""
        url = (
            self.admin
            if role == self.admin.username
            else self.admin.set(username=role, password=self.password)
        )
        return url.set(database=self.database).render_as_string(hide_password=False)

    def engine(self, role: str):
        return get_engine(self.url(role))


@pytest.fixture
def cluster(pg_server_url):
    """Roles <tag>_owner, <tag>_app, <tag>_reader and a database owned by the owner, not migrated yet."""
    admin = make_url(pg_server_url).set(database="postgres")
    tag = f"ldtm_roles_{uuid.uuid4().hex[:10]}"
    c = Cluster(admin, tag, f"{tag}_owner", f"{tag}_app", f"{tag}_reader", uuid.uuid4().hex)
    roles = (c.owner, c.app, c.reader)
    superuser = create_engine(admin, isolation_level="AUTOCOMMIT")
    with superuser.connect() as conn:
        for role in roles:
            conn.exec_driver_sql(f"CREATE ROLE \"{role}\" LOGIN PASSWORD '{c.password}'")
        conn.exec_driver_sql(f'CREATE DATABASE "{tag}" OWNER "{c.owner}"')
    yield c
    for role in (*roles, admin.username):
        get_engine(c.url(role)).dispose()
    with superuser.connect() as conn:
        conn.execute(
            text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = :d"), {"d": tag}
        )
        conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{tag}"')
        for role in roles:
            conn.exec_driver_sql(f'DROP ROLE IF EXISTS "{role}"')
    superuser.dispose()


@pytest.fixture
def granted(cluster):
    """The database migrated by its owner, then `grant()` run by the owner (the deployment's order)."""
    upgrade(cluster.url(cluster.owner))
    db_roles.grant(cluster.engine(cluster.owner), cluster.app, cluster.reader)
    return cluster


def _denied(engine, sql: str, params: dict | None = None) -> None:
    with pytest.raises(ProgrammingError, match=DENIED), engine.begin() as conn:
        conn.execute(text(sql) if isinstance(sql, str) else sql, params or {})


def _acls(engine) -> list:
    """Every table, column and default ACL of the database: what a grant changes."""
    with engine.connect() as conn:
        return conn.execute(
            text(
                "SELECT c.relname::text, c.relacl::text, "
                "  (SELECT array_agg(a.attname::text || '=' || a.attacl::text ORDER BY a.attname) "
                "   FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attacl IS NOT NULL) "
                "FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE n.nspname = 'public' "
                "UNION ALL SELECT 'default:' || d.defaclobjtype::text, d.defaclacl::text, NULL FROM pg_default_acl d "
                "UNION ALL SELECT 'schema', n.nspacl::text, NULL FROM pg_namespace n WHERE n.nspname = 'public' "
                "ORDER BY 1"
            )
        ).all()


def test_the_policy_names_tables_and_columns_of_the_schema():
    for table, rule in db_roles.APPEND_ONLY.items():
        assert table in metadata.tables, table
        assert set(rule.updatable) <= set(metadata.tables[table].c.keys()), table
    # No column of the published prediction or its hash chain is ever updatable.
    fixed = {"ticker", "run_date", "run_date_close", "prev_close", "model_id", "model_version", "mode"}
    fixed |= {"direction_pred", "in_sample", "neutral_band_pct", "run_id", "created_at", "model_status"}
    fixed |= {
        "prev_hash",
        "row_hash",
        "chain_version",
        *(h.col(c) for h in HORIZONS for c in ("pred", "date")),
    }
    assert not fixed & set(db_roles.APPEND_ONLY["snapshots"].updatable)
    assert {"id", "run_id", "kind", "started_at"}.isdisjoint(db_roles.APPEND_ONLY["run_log"].updatable)


def test_the_app_role_appends_snapshots_but_never_rewrites_a_prediction_or_deletes(granted):
    app = granted.engine(granted.app)
    with app.begin() as conn:
        mid = registry_row(conn, "AAPL", "active")
        sid = conn.execute(insert(snapshots).values(snapshot_row(mid)).returning(snapshots.c.id)).scalar_one()
    # A published prediction, its hash, its chain link: never rewritten; no row ever deleted.
    _denied(app, update(snapshots).where(snapshots.c.id == sid).values(next_day_pred=150.0))
    _denied(app, "UPDATE snapshots SET row_hash = 'forged', prev_hash = 'x'")
    _denied(app, "UPDATE snapshots SET run_date = run_date + 1")
    _denied(app, "DELETE FROM snapshots")
    _denied(app, delete(snapshots).where(snapshots.c.id == sid))
    _denied(app, "TRUNCATE snapshots")
    # The answer columns fillback and refill write are the only ones it may set.
    with app.begin() as conn:
        conn.execute(update(snapshots).where(snapshots.c.id == sid).values(next_day_actual=102.0))
    with granted.engine(granted.owner).connect() as conn:
        row = conn.execute(select(snapshots).where(snapshots.c.id == sid)).one()
    assert (row.next_day_pred, row.row_hash, row.next_day_actual) == (101.0, "0" * 64, 102.0)
    # The other audit tables: appended to, never deleted from.
    _denied(app, "DELETE FROM run_log")
    _denied(app, "UPDATE run_log SET kind = 'forged'")
    _denied(app, "DELETE FROM registry_events")
    _denied(app, "UPDATE gate_trials SET trials = 1")
    _denied(app, "DELETE FROM fill_revisions")
    _denied(app, "UPDATE alembic_version SET version_num = 'x'")


def test_the_database_refuses_a_filled_answer_changed_outside_the_logged_refill(granted):
    """Revision 0037's trigger: the app role may fill an empty answer, never change a filled one unless its
    re-fill is logged in fill_revisions first; the owner (migrations) is not held."""
    app = granted.engine(granted.app)
    with app.begin() as conn:
        mid = registry_row(conn, "AAPL", "active")
        sid = conn.execute(insert(snapshots).values(snapshot_row(mid)).returning(snapshots.c.id)).scalar_one()
        conn.execute(
            update(snapshots)
            .where(snapshots.c.id == sid)
            .values(next_day_actual=102.0, next_day_pct_error=-1.0)
        )
    refused = "append-only: the filled next_day"
    for values in (
        {"next_day_actual": 103.0},
        {"next_day_pct_error": 0.0},
        {"next_day_direction_correct": True},
    ):
        with pytest.raises(ProgrammingError, match=refused), app.begin() as conn:
            conn.execute(update(snapshots).where(snapshots.c.id == sid).values(**values))
    # The logged path: the revision first, then the new answer, in one transaction.
    with app.begin() as conn:
        refill_next_day(conn, sid, 102.0, 103.0, -1.0, -1.9)
    # An empty horizon is still filled freely (fillback's first fill).
    with app.begin() as conn:
        conn.execute(update(snapshots).where(snapshots.c.id == sid).values(one_month_actual=99.0))
    # The owner, who runs migrations, is not held (nor is a superuser: either could drop the trigger).
    with granted.engine(granted.owner).begin() as conn:
        conn.execute(update(snapshots).where(snapshots.c.id == sid).values(next_day_actual=104.0))
        assert conn.execute(select(snapshots.c.next_day_actual)).scalar_one() == 104.0


def test_temporary_tables_cannot_shadow_what_the_trigger_reads(granted):
    """The app role may create temporary tables (ingest stages its COPY in one). Under 0037 a temporary
    `fill_revisions` with a made-up log row let it change a filled answer, and a temporary `pg_roles`
    made the trigger take it for a superuser and skip every rule (the same change, with no log at all).
    From 0038 the trigger reads pg_catalog and the app's own schema only: both attacks are refused."""
    app = granted.engine(granted.app)
    with app.begin() as conn:
        mid = registry_row(conn, "AAPL", "active")
        sid = conn.execute(insert(snapshots).values(snapshot_row(mid)).returning(snapshots.c.id)).scalar_one()
        conn.execute(update(snapshots).where(snapshots.c.id == sid).values(next_day_actual=102.0))
    forged_log = (
        "CREATE TEMP TABLE fill_revisions (snapshot_id integer, horizon text, old_actual float8, "
        "new_actual float8); INSERT INTO fill_revisions VALUES (:sid, 'next_day', 102.0, 103.0); "
        "UPDATE snapshots SET next_day_actual = 103.0 WHERE id = :sid"
    )
    superuser = (
        "CREATE TEMP TABLE pg_roles AS SELECT current_user::name AS rolname, true AS rolsuper; "
        "UPDATE snapshots SET next_day_actual = 103.0 WHERE id = :sid"
    )
    for attack in (forged_log, superuser):
        with pytest.raises(ProgrammingError, match="the filled next_day actual"), app.begin() as conn:
            conn.execute(text(attack), {"sid": sid})
    with granted.engine(granted.owner).connect() as conn:
        assert conn.execute(select(snapshots.c.next_day_actual).where(snapshots.c.id == sid)).all() == [
            (102.0,)
        ]


def test_the_app_role_writes_an_ordinary_table(granted):
    app = granted.engine(granted.app)
    bar = {"ticker": "AAPL", "date": dt.date(2024, 3, 1), "open": 1.0, "high": 2.0, "low": 1.0, "close": 1.5}
    bar |= {"volume": 10, "source": "test", "ingested_at": dt.datetime.now(dt.UTC)}
    with app.begin() as conn:
        conn.execute(insert(prices).values(bar))
        assert conn.execute(update(prices).values(close=1.75)).rowcount == 1
        assert conn.execute(select(prices.c.close)).scalar_one() == 1.75
        assert conn.execute(delete(prices)).rowcount == 1


def test_the_app_role_runs_no_ddl(granted):
    app = granted.engine(granted.app)
    _denied(app, "CREATE TABLE public.sneaky (id int)")
    _denied(app, "CREATE TABLE sneaky (id int)")  # the search path's first schema that exists: public
    _denied(app, "CREATE VIEW public.sneaky AS SELECT 1 AS one")
    _denied(app, "DROP TABLE prices")
    _denied(app, "DROP TABLE snapshots")
    _denied(app, "ALTER TABLE snapshots ADD COLUMN sneaky int")
    _denied(app, "CREATE INDEX sneaky ON prices (close)")
    _denied(app, "TRUNCATE prices")
    _denied(app, "CREATE SCHEMA sneaky")
    with granted.engine(granted.owner).connect() as conn:
        assert conn.execute(text("SELECT to_regclass('public.sneaky')")).scalar() is None


def test_the_reader_only_reads(granted):
    with granted.engine(granted.app).begin() as conn:
        registry_row(conn, "AAPL")
    reader = granted.engine(granted.reader)
    with reader.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM model_registry")).scalar_one() == 1
        conn.execute(text("SELECT * FROM snapshots")).all()
        conn.execute(text("SELECT * FROM accuracy_30d")).all()  # the views read with their owner's rights
    _denied(reader, "INSERT INTO run_log (run_id, kind, started_at, status) VALUES ('r', 'x', now(), 'ok')")
    _denied(reader, "UPDATE model_registry SET status = 'retired'")
    _denied(reader, "DELETE FROM model_registry")
    _denied(reader, "CREATE TABLE sneaky (id int)")


def test_both_roles_open_the_database_as_every_entry_point_does(granted, monkeypatch, tmp_path):
    """A command opens the database through the migration check: at the newest revision it needs no DDL."""
    monkeypatch.setenv("LDTM_HOME", str(tmp_path / "home"))
    for role in (granted.app, granted.reader):
        monkeypatch.setenv("LDTM_DATABASE_URL", granted.url(role))
        out = CliRunner().invoke(cli, ["prices", "summary"])
        assert out.exit_code == 0, out.output


def test_grant_is_idempotent_and_the_same_after_every_run(granted):
    owner = granted.engine(granted.owner)
    before = _acls(owner)
    again = db_roles.grant(owner, granted.app, granted.reader)
    assert _acls(owner) == before
    assert again.append_only == tuple(sorted(db_roles.APPEND_ONLY))
    assert "prices" in again.tables and "snapshots" not in again.tables
    assert again.read_only == ("alembic_version",)
    # A privilege granted by hand beyond the policy is taken back by the next run.
    with owner.begin() as conn:
        conn.exec_driver_sql(f'GRANT DELETE, TRUNCATE ON snapshots TO "{granted.app}"')
    db_roles.grant(owner, granted.app, granted.reader)
    assert _acls(owner) == before
    _denied(granted.engine(granted.app), "DELETE FROM snapshots")


def test_a_table_a_later_migration_creates_is_granted_by_default(granted, monkeypatch):
    owner = granted.engine(granted.owner)
    with owner.begin() as conn:  # what a later migration would run, as the owner
        conn.exec_driver_sql("CREATE TABLE later_rows (id serial PRIMARY KEY, v int NOT NULL)")
        conn.exec_driver_sql("INSERT INTO later_rows (v) VALUES (1)")
    with granted.engine(granted.reader).connect() as conn:
        assert conn.execute(text("SELECT v FROM later_rows")).scalar_one() == 1
    _denied(granted.engine(granted.reader), "INSERT INTO later_rows (v) VALUES (2)")
    app = granted.engine(granted.app)
    with app.begin() as conn:  # rows, ids from its sequence: no grant needed
        conn.exec_driver_sql("INSERT INTO later_rows (v) VALUES (2)")
        conn.exec_driver_sql("DELETE FROM later_rows WHERE v = 2")
    # A later append-only table gets its rule when grant runs again after the upgrade.
    rules = {**db_roles.APPEND_ONLY, "later_rows": db_roles.AppendOnly("a later audit table")}
    monkeypatch.setattr(db_roles, "APPEND_ONLY", rules)
    db_roles.grant(owner, granted.app, granted.reader)
    _denied(app, "DELETE FROM later_rows")
    _denied(app, "UPDATE later_rows SET v = 3")
    with app.begin() as conn:
        conn.exec_driver_sql("INSERT INTO later_rows (v) VALUES (4)")
    # A later view is read only: written through, it would write with its owner's rights.
    with owner.begin() as conn:
        conn.exec_driver_sql("CREATE VIEW later_view AS SELECT id, next_day_pred FROM snapshots")
    db_roles.grant(owner, granted.app, granted.reader)
    _denied(app, "UPDATE later_view SET next_day_pred = 1")
    _denied(app, "DELETE FROM later_view")
    with granted.engine(granted.reader).connect() as conn:
        conn.exec_driver_sql("SELECT * FROM later_view").all()


def test_sqlite_has_no_roles(sqlite_url):
    with pytest.raises(ConfigError, match="roles do not exist on sqlite"):
        db_roles.grant(get_engine(sqlite_url), "ldtm_app", "ldtm_reader")


@pytest.mark.parametrize(
    "name",
    ["", "App", "1app", "ldtm-app", "a b", 'x"; DROP TABLE prices; --', "a" * 64, "pg_monitor", "public"],
)
def test_a_bad_role_name_is_refused(sqlite_url, name):
    with pytest.raises(InputError, match="--app"):
        db_roles.grant(get_engine(sqlite_url), name, "ldtm_reader")
    with pytest.raises(InputError, match="--reader"):
        db_roles.grant(get_engine(sqlite_url), "ldtm_app", name)


def test_roles_that_would_defeat_the_policy_are_refused(cluster):
    upgrade(cluster.url(cluster.owner))
    owner = cluster.engine(cluster.owner)
    with pytest.raises(ConfigError, match="does not exist"):
        db_roles.grant(owner, f"{cluster.app}_nobody", cluster.reader)
    with pytest.raises(ConfigError, match="the owner of the tables"):
        db_roles.grant(owner, cluster.owner, cluster.reader)
    with pytest.raises(InputError, match="role of its own"):
        db_roles.grant(owner, cluster.app, cluster.app)
    superuser = create_engine(cluster.admin, isolation_level="AUTOCOMMIT")
    try:
        with superuser.connect() as conn:
            conn.exec_driver_sql(f'GRANT "{cluster.owner}" TO "{cluster.app}"')
        with pytest.raises(ConfigError, match="member of the owner role"):
            db_roles.grant(owner, cluster.app, cluster.reader)
        with superuser.connect() as conn:
            conn.exec_driver_sql(f'REVOKE "{cluster.owner}" FROM "{cluster.app}"')
    finally:
        superuser.dispose()
    # Run by another role (a superuser) than the tables' owner: the default privileges would be its own.
    with pytest.raises(ConfigError, match="as the role that owns the tables"):
        db_roles.grant(cluster.engine(cluster.admin.username), cluster.app, cluster.reader)
    # Run by the app role, naming itself: it was told it is "the owner of the tables", which it is not.
    with pytest.raises(ConfigError, match=f"belong to {cluster.owner}, not to {cluster.app}"):
        db_roles.grant(cluster.engine(cluster.app), cluster.app, cluster.reader)
    with owner.connect() as conn:  # nothing was granted by any refused run
        assert not conn.execute(
            text("SELECT has_table_privilege(:r, 'snapshots', 'SELECT')"), {"r": cluster.app}
        ).scalar_one()


def test_the_pipeline_writes_as_the_app_role(granted, tmp_path, monkeypatch):
    """Ingest (COPY into a temporary table, then upsert), register models, predict, fill back, record a
    split and re-fill, judge a backtest and promote, audit with its anchor: all as the application role."""
    monkeypatch.delenv(AUDIT_KEY_ENV, raising=False)
    url = granted.url(granted.app)
    engine = get_engine(url)
    settings = make_settings(tmp_path, url)
    df = ingest(engine, ["AAPL"])
    old = make_model(engine, settings, "AAPL", seed=1)
    registry.promote(engine, old, "first", settings)
    dates = sorted(df["date"].unique())
    for d in [dates[-30], *dates[-4:-1]]:
        predict(engine, settings, run_date=d)
    assert fillback(engine).total_filled > 0
    bar = df[(df["ticker"] == "AAPL") & (df["date"] == dates[-2])].copy()
    for c in ("open", "high", "low", "close"):
        bar[c] = bar[c] * 1.01
    ingest_frame(engine, bar, "vendor")  # a revised bar: refilled, the old value kept
    assert len(refill(engine, automatic=True).refilled) == 1
    with engine.begin() as conn:
        record_actions(conn, [Action("AAPL", dates[-40], 0.5, "split", "test")])
    refill(engine, automatic=True)
    mid = make_model(engine, settings, "AAPL", seed=2, trained_on=dt.date(2024, 3, 1))
    add_backtest(engine, mid, [(60, 0.55, 0.50, 1.5, 0), (40, 0.60, 0.45, 2.0, 0)])
    report = run_gate(engine, settings, "AAPL", thresholds=GateThresholds(policy="seed"))
    assert report.passed and registry.active_model(engine, "AAPL").id == mid
    assert verify(engine, record=True).ok
    with engine.connect() as conn:
        assert conn.execute(text("SELECT current_user")).scalar_one() == granted.app
        n = {t: conn.execute(text(f"SELECT count(*) FROM {t}")).scalar_one() for t in db_roles.APPEND_ONLY}  # noqa: S608
        runs = conn.execute(select(run_log.c.kind, run_log.c.status)).all()
        assert conn.execute(select(snapshots.c.id).where(snapshots.c.next_day_actual.is_(None))).all() == []
    assert n["snapshots"] == 4 and n["fill_revisions"] >= 1 and n["corporate_actions"] == 1
    assert n["registry_events"] >= 3 and n["gate_decisions"] == 1 and n["backtest_folds"] == 2
    assert {k for k, _ in runs} >= {"predict", "audit"} and {st for _, st in runs} == {"ok"}
    # The reader sees what the application wrote.
    with granted.engine(granted.reader).connect() as conn:
        assert conn.execute(select(snapshots.c.id)).all()


def _invoke(monkeypatch, url: str, *args: str):
    monkeypatch.setenv("LDTM_DATABASE_URL", url)
    return CliRunner().invoke(cli, ["db", "grant", *args])


def test_cli_grants_and_prints_one_line_per_role(cluster, monkeypatch, tmp_path):
    monkeypatch.setenv("LDTM_HOME", str(tmp_path / "home"))
    owner_url = cluster.url(cluster.owner)
    upgrade(owner_url, "0029")  # a release's newest migration not applied yet
    out = _invoke(monkeypatch, owner_url, "--app", cluster.app, "--reader", cluster.reader)
    assert out.exit_code == 2 and "run `ldtm db upgrade`" in out.output and "0029" in out.output
    upgrade(owner_url)
    out = _invoke(monkeypatch, owner_url, "--app", cluster.app, "--reader", cluster.reader)
    assert out.exit_code == 0, out.output
    lines = out.output.splitlines()
    assert cluster.password not in out.output
    [app_line] = [x for x in lines if x.strip().startswith(f"app role {cluster.app}:")]
    [reader_line] = [x for x in lines if x.strip().startswith(f"reader role {cluster.reader}:")]
    assert "append-only" in app_line and "snapshots" in app_line and "no DDL" in app_line
    assert "SELECT on" in reader_line and "nothing else" in reader_line
    _denied(cluster.engine(cluster.app), "DELETE FROM snapshots")
    out = _invoke(monkeypatch, owner_url, "--app", "Bad-Name", "--reader", cluster.reader)
    assert out.exit_code == 2 and "not a role name" in out.output


def test_cli_on_sqlite_says_roles_do_not_exist(monkeypatch, sqlite_url, tmp_path):
    monkeypatch.setenv("LDTM_HOME", str(tmp_path / "home"))
    out = _invoke(monkeypatch, sqlite_url, "--app", "ldtm_app", "--reader", "ldtm_reader")
    assert out.exit_code == 2 and "roles do not exist on sqlite" in out.output
