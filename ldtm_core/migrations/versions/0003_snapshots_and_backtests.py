"""snapshots (hash-chained predictions) and backtest folds

Revision ID: 0003
Revises: 0002
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "backtest_folds",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("backtest_id", sa.String(length=36), nullable=False),
        sa.Column("model_id", sa.Integer(), nullable=True),
        sa.Column("ticker", sa.String(length=12), nullable=False),
        sa.Column("fold", sa.Integer(), nullable=False),
        sa.Column("cutoff", sa.Date(), nullable=False),
        sa.Column("train_start", sa.Date(), nullable=False),
        sa.Column("train_end", sa.Date(), nullable=False),
        sa.Column("test_start", sa.Date(), nullable=False),
        sa.Column("test_end", sa.Date(), nullable=False),
        sa.Column("n", sa.Integer(), nullable=False),
        sa.Column("direction_accuracy", sa.Float(), nullable=False),
        sa.Column("always_up_accuracy", sa.Float(), nullable=False),
        sa.Column("mean_abs_pct_error", sa.Float(), nullable=False),
        sa.Column("leakage_rows", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["model_id"],
            ["model_registry.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("backtest_id", "fold", name="uq_backtest_fold"),
    )
    with op.batch_alter_table("backtest_folds", schema=None) as batch_op:
        batch_op.create_index("ix_backtest_ticker", ["ticker", "model_id"], unique=False)
    op.create_table(
        "snapshots",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("ticker", sa.String(length=12), nullable=False),
        sa.Column("run_date", sa.Date(), nullable=False),
        sa.Column("run_date_close", sa.Float(), nullable=False),
        sa.Column("prev_close", sa.Float(), nullable=True),
        sa.Column("model_id", sa.Integer(), nullable=False),
        sa.Column("model_version", sa.String(length=40), nullable=False),
        sa.Column("model_status", sa.String(length=12), nullable=False),
        sa.Column("mode", sa.String(length=8), nullable=False),
        sa.Column("next_day_pred", sa.Float(), nullable=False),
        sa.Column("next_monday_pred", sa.Float(), nullable=False),
        sa.Column("one_month_pred", sa.Float(), nullable=False),
        sa.Column("direction_pred", sa.String(length=8), nullable=False),
        sa.Column("next_day_date", sa.Date(), nullable=False),
        sa.Column("next_monday_date", sa.Date(), nullable=False),
        sa.Column("one_month_date", sa.Date(), nullable=False),
        sa.Column("run_id", sa.String(length=36), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("prev_hash", sa.String(length=64), nullable=False),
        sa.Column("row_hash", sa.String(length=64), nullable=False),
        sa.Column("next_day_actual", sa.Float(), nullable=True),
        sa.Column("next_day_pct_error", sa.Float(), nullable=True),
        sa.Column("next_day_direction_actual", sa.String(length=8), nullable=True),
        sa.Column("next_day_direction_correct", sa.Boolean(), nullable=True),
        sa.Column("next_monday_actual", sa.Float(), nullable=True),
        sa.Column("next_monday_pct_error", sa.Float(), nullable=True),
        sa.Column("one_month_actual", sa.Float(), nullable=True),
        sa.Column("one_month_pct_error", sa.Float(), nullable=True),
        sa.Column("filled_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint(
            "direction_pred IN ('bullish','neutral','bearish')", name="ck_snapshots_direction"
        ),
        sa.CheckConstraint("mode IN ('live','replay')", name="ck_snapshots_mode"),
        sa.ForeignKeyConstraint(
            ["model_id"],
            ["model_registry.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("ticker", "prev_hash", name="uq_snapshots_chain"),
        sa.UniqueConstraint("ticker", "run_date", "model_version", name="uq_snapshots_ticker_date_model"),
    )
    with op.batch_alter_table("snapshots", schema=None) as batch_op:
        batch_op.create_index("ix_snapshots_run_date", ["run_date"], unique=False)


def downgrade() -> None:
    op.drop_table("snapshots")
    op.drop_table("backtest_folds")
