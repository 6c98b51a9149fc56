"""ingested_files.refused: which tickers of a dropped file were refused, and why (JSON {ticker: reason})

The files source re-reads a refused file under --force / --refetch and names the refusal when a ticker
has no newer file; the free-text `error` cannot say reliably which ticker a reason belongs to.
NULL on rows written before this revision.

Revision ID: 0018
Revises: 0017
"""

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("ingested_files") as batch:
        batch.add_column(sa.Column("refused", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("ingested_files") as batch:
        batch.drop_column("refused")
