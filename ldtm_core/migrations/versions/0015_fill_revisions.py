"""fill_revisions: every re-fill of a snapshot actual, with the old value and the reason (issue 20 item 1);
snapshots.chain_version: the row hash definition a row was written under (item 8b; existing rows are 1)

Revision ID: 0015
Revises: 0014
"""

import importlib.util
from pathlib import Path

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "fill_revisions",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("snapshot_id", sa.Integer(), sa.ForeignKey("snapshots.id"), nullable=False),
        sa.Column("ticker", sa.String(12), nullable=False),
        sa.Column("run_date", sa.Date(), nullable=False),
        sa.Column("horizon", sa.String(12), nullable=False),
        sa.Column("old_actual", sa.Float(), nullable=False),
        sa.Column("new_actual", sa.Float(), nullable=False),
        sa.Column("old_pct_error", sa.Float()),
        sa.Column("new_pct_error", sa.Float(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("revised_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_fill_revisions_snapshot", "fill_revisions", ["snapshot_id"])
    # A plain ADD COLUMN (SQLite allows it with a constant default): a batch copy of snapshots would
    # break the views that read it.
    op.add_column(
        "snapshots", sa.Column("chain_version", sa.Integer(), nullable=False, server_default=sa.text("1"))
    )


def downgrade() -> None:
    op.drop_index("ix_fill_revisions_snapshot", table_name="fill_revisions")
    op.drop_table("fill_revisions")
    # The views select `s.*` (PostgreSQL expands it at creation, so they depend on chain_version once a
    # later revision rebuilt them): drop them around the column and restore 0005's definitions.
    path = Path(__file__).with_name("0005_accountability_integrity.py")
    spec = importlib.util.spec_from_file_location("ldtm_migration_0005", path)
    v5 = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(v5)
    for name in v5.VIEWS:
        op.execute(f"DROP VIEW IF EXISTS {name}")
    op.drop_column("snapshots", "chain_version")  # native DROP COLUMN (SQLite >= 3.35)
    dialect = op.get_bind().dialect.name
    for name in v5.VIEWS:
        op.execute(v5.create_view_sql(name, dialect))
