"""model registry, its events, and the run log

Revision ID: 0002
Revises: 0001
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "model_registry",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("ticker", sa.String(length=12), nullable=False),
        sa.Column("status", sa.String(length=12), nullable=False),
        sa.Column("profile", sa.String(length=32), nullable=False),
        sa.Column("arch_signature", sa.String(length=64), nullable=False),
        sa.Column("config_json", sa.Text(), nullable=False),
        sa.Column("trained_on_date", sa.Date(), nullable=False),
        sa.Column("val_loss", sa.Float(), nullable=True),
        sa.Column("epochs", sa.Integer(), nullable=True),
        sa.Column("device", sa.String(length=32), nullable=True),
        sa.Column("duration_s", sa.Float(), nullable=True),
        sa.Column("metrics_json", sa.Text(), nullable=True),
        sa.Column("checkpoint_path", sa.Text(), nullable=False),
        sa.Column("checkpoint_sha256", sa.String(length=64), nullable=False),
        sa.Column("version", sa.String(length=40), nullable=True),
        sa.Column("promoted_path", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint("status IN ('candidate','active','retired')", name="ck_registry_status"),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("model_registry", schema=None) as batch_op:
        batch_op.create_index("ix_registry_ticker_status", ["ticker", "status"], unique=False)
        batch_op.create_index(
            "uq_registry_one_active",
            ["ticker"],
            unique=True,
            sqlite_where=sa.text("status = 'active'"),
            postgresql_where=sa.text("status = 'active'"),
        )
    op.create_table(
        "registry_events",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("model_id", sa.Integer(), nullable=False),
        sa.Column("ticker", sa.String(length=12), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("from_status", sa.String(length=12), nullable=True),
        sa.Column("to_status", sa.String(length=12), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(
            ["model_id"],
            ["model_registry.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("registry_events", schema=None) as batch_op:
        batch_op.create_index("ix_registry_events_ticker", ["ticker", "id"], unique=False)
    op.create_table(
        "run_log",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("run_id", sa.String(length=36), nullable=False),
        sa.Column("kind", sa.String(length=20), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("status", sa.String(length=12), nullable=False),
        sa.Column("run_date", sa.Date(), nullable=True),
        sa.Column("tickers", sa.Text(), nullable=True),
        sa.Column("n_rows", sa.Integer(), nullable=True),
        sa.Column("phases_json", sa.Text(), nullable=True),
        sa.Column("summary_json", sa.Text(), nullable=True),
        sa.Column("message", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("run_id"),
    )


def downgrade() -> None:
    op.drop_table("run_log")
    op.drop_table("registry_events")
    op.drop_table("model_registry")
