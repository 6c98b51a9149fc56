"""fill_revisions: every re-fill of a snapshot actual, with the old value and the reason (issue 20 item 1);
snapshots.chain_version: the row hash definition a row was written under (item 8b; existing rows are 1)

Revision ID: 0015
Revises: 0014
"""

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
    op.drop_column("snapshots", "chain_version")  # native DROP COLUMN (SQLite >= 3.35)
