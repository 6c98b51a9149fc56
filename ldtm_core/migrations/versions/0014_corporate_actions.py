"""corporate_actions: splits and dividends that re-base a ticker's prices (SPEC §2 price basis)

Revision ID: 0014
Revises: 0013
"""

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "corporate_actions",
        sa.Column("ticker", sa.String(12), primary_key=True),
        sa.Column("ex_date", sa.Date(), primary_key=True),
        sa.Column("kind", sa.String(12), primary_key=True),
        sa.Column("factor", sa.Float(), nullable=False),
        sa.Column("source", sa.String(32), nullable=False),
        sa.Column("recorded_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint("factor > 0", name="ck_corporate_actions_factor"),
    )


def downgrade() -> None:
    op.drop_table("corporate_actions")
