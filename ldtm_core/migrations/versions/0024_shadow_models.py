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

import sqlalchemy as sa
from alembic import op

from ldtm_core.accuracy_views import HORIZONS_0021, VIEW_NAMES, create_view_sql

revision = "0024"
down_revision = "0023"
branch_labels = None
depends_on = None

OLD_CHECK = "status IN ('candidate','active','retired')"
NEW_CHECK = "status IN ('candidate','active','retired','shadow')"


def _create_views(version: str) -> None:
    dialect = op.get_bind().dialect.name
    for name in VIEW_NAMES:
        op.execute(create_view_sql(name, dialect, version, HORIZONS_0021))


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
    for name in VIEW_NAMES:
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
    _create_views("0024")


def downgrade() -> None:
    for name in VIEW_NAMES:
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
    _create_views("0021")
