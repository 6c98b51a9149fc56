"""ingested_files: which dropped price files the `files:<dir>` source has already ingested

A file is identified by its path and the SHA-256 of its content: the same path with new content is
ingested again, an unchanged file is skipped. The row is written in the same transaction as the
file's prices, so a file is never marked done without its rows (a manifest on disk could not be).

Revision ID: 0009
Revises: 0007
"""

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "ingested_files",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("path", sa.Text(), nullable=False),
        sa.Column("sha256", sa.String(length=64), nullable=False),
        sa.Column("size_bytes", sa.BigInteger(), nullable=False),
        sa.Column("status", sa.String(length=12), nullable=False),
        sa.Column("tickers", sa.Text(), nullable=True),
        sa.Column("rows", sa.Integer(), nullable=False),
        sa.Column("written", sa.Integer(), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("ingested_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint("status IN ('ok','partial','rejected')", name="ck_ingested_files_status"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("path", "sha256", name="uq_ingested_files_path_sha"),
    )


def downgrade() -> None:
    op.drop_table("ingested_files")
