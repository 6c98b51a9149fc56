"""price_feature_rows and price_feature_sets: the tabular recipes' inputs in the store

The `features` asset now also stores the `price_features` library (the inputs of ridge, LightGBM and
their market variants) per (ticker, session), beside the five bars it came from, with the fingerprint of
the prices and the library's definition per ticker. Both tables start empty: until the `features` asset
(or `ldtm features build`) runs, every reader computes the library from prices, as before. Nothing else
changes.

Revision ID: 0036
Revises: 0035
"""

import sqlalchemy as sa
from alembic import op

revision = "0036"
down_revision = "0035"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "price_feature_rows",
        sa.Column("ticker", sa.String(12), primary_key=True),
        sa.Column("date", sa.Date(), primary_key=True),
        sa.Column("packed", sa.LargeBinary(), nullable=False),
    )
    op.create_table(
        "price_feature_sets",
        sa.Column("ticker", sa.String(12), primary_key=True),
        sa.Column("fingerprint", sa.String(255), nullable=False),
        sa.Column("definition", sa.String(255), nullable=False),
        sa.Column("columns", sa.Text(), nullable=False),
        sa.Column("rows", sa.Integer(), nullable=False),
        sa.Column("first_date", sa.Date(), nullable=True),
        sa.Column("last_date", sa.Date(), nullable=True),
        sa.Column("built_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("price_feature_sets")
    op.drop_table("price_feature_rows")
