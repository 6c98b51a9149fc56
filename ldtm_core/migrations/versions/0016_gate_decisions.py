"""gate_decisions: which backtest each promotion-gate decision judged, so none is judged twice

Revision ID: 0016
Revises: 0015
"""

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "gate_decisions",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("backtest_id", sa.String(36), nullable=False),
        sa.Column("model_id", sa.Integer(), sa.ForeignKey("model_registry.id"), nullable=False),
        sa.Column("ticker", sa.String(12), nullable=False),
        sa.Column("passed", sa.Boolean(), nullable=False),
        sa.Column("decided_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_gate_decisions_backtest", "gate_decisions", ["backtest_id"])


def downgrade() -> None:
    op.drop_index("ix_gate_decisions_backtest", table_name="gate_decisions")
    op.drop_table("gate_decisions")
