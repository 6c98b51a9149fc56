"""shadow_designs: each shadow's design, fixed when it starts (issue 28 item 8, issue 27).

The evenings a shadow needs were read from LDTM_SHADOW_SESSIONS at its conclusion, so changing the
setting during a shadow moved its bar (0 concluded it after one evening). Now the number of evenings,
the margin and power they were sized for (accountability.shadow_design), the champion it is compared
with and its timeout are stored when it starts. A shadow that started before this revision has no row
and is concluded on the current settings, as before (the report says so).

Revision ID: 0027
Revises: 0026
"""

import sqlalchemy as sa
from alembic import op

revision = "0027"
down_revision = "0026"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "shadow_designs",
        sa.Column("model_id", sa.Integer(), sa.ForeignKey("model_registry.id"), primary_key=True),
        sa.Column("ticker", sa.String(12), nullable=False),
        sa.Column("champion_model_id", sa.Integer(), sa.ForeignKey("model_registry.id"), nullable=False),
        sa.Column("sessions", sa.Integer(), nullable=False),
        sa.Column("margin_points", sa.Float(), nullable=False),
        sa.Column("power", sa.Float(), nullable=False),
        sa.Column("alpha", sa.Float(), nullable=False),
        sa.Column("max_evenings", sa.Integer(), nullable=False),
        sa.Column("after_snapshot_id", sa.Integer(), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("shadow_designs")
