"""universe_membership and unfillable_actuals: a dated universe, and fills that can never complete (issue 40)

universe_membership holds each ticker's spans of membership (start_date .. end_date, NULL end: still a
member), loaded from a Qlib-style instruments file by `ldtm universe import`. Empty after the upgrade:
with no rows every ticker of the configured universe counts as a member on every evening, as before.
unfillable_actuals names each pending horizon of a snapshot row that can never be filled (its ticker left
the universe and its prices stop before the target date), with the reason; the row itself is untouched.
Both tables start empty; nothing else changes.

Revision ID: 0033
Revises: 0032
"""

import sqlalchemy as sa
from alembic import op

revision = "0033"
down_revision = "0032"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "universe_membership",
        sa.Column("ticker", sa.String(12), nullable=False),
        sa.Column("start_date", sa.Date(), nullable=False),
        sa.Column("end_date", sa.Date(), nullable=True),
        sa.Column("source", sa.Text(), nullable=False),
        sa.Column("imported_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("ticker", "start_date", name="pk_universe_membership"),
        sa.CheckConstraint("end_date IS NULL OR end_date >= start_date", name="ck_membership_span"),
    )
    op.create_table(
        "unfillable_actuals",
        sa.Column("snapshot_id", sa.Integer(), sa.ForeignKey("snapshots.id"), nullable=False),
        sa.Column("horizon", sa.String(12), nullable=False),
        sa.Column("ticker", sa.String(12), nullable=False),
        sa.Column("target_date", sa.Date(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("marked_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("snapshot_id", "horizon", name="pk_unfillable_actuals"),
    )


def downgrade() -> None:
    op.drop_table("unfillable_actuals")
    op.drop_table("universe_membership")
