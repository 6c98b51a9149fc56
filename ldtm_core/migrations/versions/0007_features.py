"""features (the 11 per ticker and session) and feature_sets (the price fingerprint they came from)

Revision ID: 0007
Revises: 0005
"""

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0005"
branch_labels = None
depends_on = None

FEATURE_COLUMNS = (
    "open",
    "high",
    "low",
    "close",
    "volume",
    "log_return_1d",
    "log_return_5d",
    "rsi_14",
    "close_sma_5",
    "close_sma_10",
    "close_sma_20",
)


def upgrade() -> None:
    op.create_table(
        "features",
        sa.Column("ticker", sa.String(length=12), nullable=False),
        sa.Column("date", sa.Date(), nullable=False),
        *(sa.Column(name, sa.Float(), nullable=False) for name in FEATURE_COLUMNS),
        sa.PrimaryKeyConstraint("ticker", "date"),
    )
    op.create_table(
        "feature_sets",
        sa.Column("ticker", sa.String(length=12), nullable=False),
        sa.Column("fingerprint", sa.String(length=255), nullable=False),
        sa.Column("definition", sa.String(length=255), nullable=False),
        sa.Column("price_rows", sa.Integer(), nullable=False),
        sa.Column("rows", sa.Integer(), nullable=False),
        sa.Column("warmup_rows", sa.Integer(), nullable=False),
        sa.Column("first_date", sa.Date(), nullable=True),
        sa.Column("last_date", sa.Date(), nullable=True),
        sa.Column("built_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("ticker"),
    )


def downgrade() -> None:
    op.drop_table("feature_sets")
    op.drop_table("features")
