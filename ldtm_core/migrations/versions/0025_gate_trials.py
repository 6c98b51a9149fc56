"""gate_trials: the trials ledger of the promotion gate (issue 27)

Every recipe (config signature) the evidence-policy gate judged on a ticker's folds, one row per
(ticker, recipe, evidence): the count of recipes tried on overlapping folds sets the adjusted alpha
of the next superiority claim (Bonferroni), and the same evidence is judged once.

Revision ID: 0025
Revises: 0024
"""

import sqlalchemy as sa
from alembic import op

revision = "0025"
down_revision = "0024"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "gate_trials",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("ticker", sa.String(12), nullable=False),
        sa.Column("config_signature", sa.String(64), nullable=False),
        sa.Column("evidence_key", sa.String(64), nullable=False),
        sa.Column("cutoffs", sa.Text(), nullable=False),
        sa.Column("kind", sa.String(24), nullable=False),
        sa.Column("backtest_id", sa.String(36), nullable=False),
        sa.Column("model_id", sa.Integer(), sa.ForeignKey("model_registry.id"), nullable=False),
        sa.Column("trials", sa.Integer(), nullable=False),
        sa.Column("alpha_adjusted", sa.Float(), nullable=False),
        sa.Column("decision", sa.String(24), nullable=False),
        sa.Column("judged_at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("ticker", "config_signature", "evidence_key", name="uq_gate_trials_evidence"),
    )
    op.create_index("ix_gate_trials_ticker", "gate_trials", ["ticker"])


def downgrade() -> None:
    op.drop_index("ix_gate_trials_ticker", table_name="gate_trials")
    op.drop_table("gate_trials")
