"""backtest_fold_results: a fold's outcome stored under its reuse key; backtest_folds.fold_key links to it

A backtest that finds a stored result for the same key (config signature, fingerprint of the fold's
rows, cutoff, seed, the key of the fold it was warm-started from) reuses it instead of refitting. The
per-row predictions the paired gate needs are kept with it. `fold_key` is NULL on rows written before.

Revision ID: 0022
Revises: 0021
"""

import sqlalchemy as sa
from alembic import op

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "backtest_fold_results",
        sa.Column("fold_key", sa.String(64), primary_key=True),
        sa.Column("ticker", sa.String(12), nullable=False),
        sa.Column("config_signature", sa.String(64), nullable=False),
        sa.Column("data_fingerprint", sa.String(64), nullable=False),
        sa.Column("cutoff", sa.Date(), nullable=False),
        sa.Column("seed", sa.Integer(), nullable=False),
        sa.Column("parent_key", sa.String(64)),
        sa.Column("weights_path", sa.Text()),
        sa.Column("result_json", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_fold_results_ticker", "backtest_fold_results", ["ticker", "config_signature"])
    with op.batch_alter_table("backtest_folds") as batch:
        batch.add_column(sa.Column("fold_key", sa.String(64), nullable=True))
        batch.add_column(sa.Column("reused", sa.Boolean(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("backtest_folds") as batch:
        batch.drop_column("reused")
        batch.drop_column("fold_key")
    op.drop_index("ix_fold_results_ticker", table_name="backtest_fold_results")
    op.drop_table("backtest_fold_results")
