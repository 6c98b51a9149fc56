"""ix_snapshots_ticker_id: the newest row of a ticker's chain by one index probe (issue 31 item 2).

`chain.chain_heads` (predict's write and its run_log anchor, the audit) asks for max(id) per ticker.
No index led with (ticker, id), so PostgreSQL either read every row of each ticker's chain or walked
the primary key backwards past other tickers' rows: a cost growing with the stored history.

Revision ID: 0028
Revises: 0027
"""

from alembic import op

revision = "0028"
down_revision = "0027"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_snapshots_ticker_id", "snapshots", ["ticker", "id"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_snapshots_ticker_id", table_name="snapshots")
