"""Shadow models: registry status 'shadow', at most one per ticker, and the boards leave shadow rows out

A challenger that passed the gate can serve in shadow (LDTM_SHADOW_SESSIONS > 0): every nightly
predicts with the champion and the shadow, both rows hash-chained, the shadow's marked
`model_status = 'shadow'`. A shadow row is never the published forecast: the eight accuracy views
drop shadow rows before choosing the first row of an evening (a shadow row written before the
champion's must not become what was "published") and in the per-model views as well; the shadow's
record is read by accountability.shadow, side by side with the champion's.

SQLite cannot alter a CHECK constraint, and rebuilding model_registry (batch mode) would trip the
foreign keys of every table that references it: widening the constraint rewrites only its text in
the schema (writable_schema, the documented procedure for loosening a CHECK), which changes no
stored row. PostgreSQL drops and re-creates the constraint.

Revision ID: 0024
Revises: 0023
"""

import importlib.util
from pathlib import Path

import sqlalchemy as sa
from alembic import op

revision = "0024"
down_revision = "0023"
branch_labels = None
depends_on = None

OLD_CHECK = "status IN ('candidate','active','retired')"
NEW_CHECK = "status IN ('candidate','active','retired','shadow')"


def _v21():
    path = Path(__file__).with_name("0021_ungated_rows.py")
    spec = importlib.util.spec_from_file_location("ldtm_migration_0021", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


NOT_SHADOW = "s.model_status <> 'shadow'"
FIRST_PUBLISHED = "s.id IN (SELECT MIN(f.id) FROM snapshots f WHERE f.model_status <> 'shadow' GROUP BY f.ticker, f.run_date)"


def _views(v21) -> dict:
    out = {}
    for name, (keys, scored) in v21.VIEWS.items():
        scored = scored.replace(v21.FIRST_OF_EVENING, FIRST_PUBLISHED)
        out[name] = (keys, scored if FIRST_PUBLISHED in scored else f"{scored} AND {NOT_SHADOW}")
    return out


def _create_views(views: dict, v21) -> None:
    dialect = op.get_bind().dialect.name
    saved = v21.VIEWS
    v21.VIEWS = views
    try:
        for name in views:
            op.execute(v21.create_view_sql(name, dialect))
    finally:
        v21.VIEWS = saved


def _set_check(old: str, new: str) -> None:
    bind = op.get_bind()
    if bind.dialect.name != "sqlite":
        op.drop_constraint("ck_registry_status", "model_registry", type_="check")
        op.create_check_constraint("ck_registry_status", "model_registry", new)
        return
    sql = bind.exec_driver_sql(
        "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'model_registry'"
    ).scalar_one()
    if sql.count(old) != 1:
        raise RuntimeError(f"model_registry's CHECK is not the expected {old!r}: {sql}")
    version = bind.exec_driver_sql("PRAGMA schema_version").scalar_one()
    bind.exec_driver_sql("PRAGMA writable_schema = ON")
    bind.exec_driver_sql(
        "UPDATE sqlite_master SET sql = ? WHERE type = 'table' AND name = 'model_registry'",
        (sql.replace(old, new),),
    )
    bind.exec_driver_sql(f"PRAGMA schema_version = {int(version) + 1}")
    bind.exec_driver_sql("PRAGMA writable_schema = OFF")


def upgrade() -> None:
    v21 = _v21()
    for name in v21.VIEWS:
        op.execute(f"DROP VIEW IF EXISTS {name}")
    _set_check(OLD_CHECK, NEW_CHECK)
    op.create_index(
        "uq_registry_one_shadow",
        "model_registry",
        ["ticker"],
        unique=True,
        sqlite_where=sa.text("status = 'shadow'"),
        postgresql_where=sa.text("status = 'shadow'"),
    )
    _create_views(_views(v21), v21)


def downgrade() -> None:
    v21 = _v21()
    for name in v21.VIEWS:
        op.execute(f"DROP VIEW IF EXISTS {name}")
    op.drop_index("uq_registry_one_shadow", table_name="model_registry")
    # A shadow goes back to candidate (what it was before the gate), its event says so.
    op.execute(
        "INSERT INTO registry_events (model_id, ticker, at, from_status, to_status, reason) "
        "SELECT id, ticker, CURRENT_TIMESTAMP, 'shadow', 'candidate', 'schema downgrade below 0024' "
        "FROM model_registry WHERE status = 'shadow'"
    )
    op.execute("UPDATE model_registry SET status = 'candidate' WHERE status = 'shadow'")
    _set_check(NEW_CHECK, OLD_CHECK)
    _create_views(v21.VIEWS, v21)
