"""universe_trials: the ledger of universe verdicts on a recipe change

One row per universe judgement ("is recipe B better than what serves now, on this universe?", `ldtm gate
universe`): the challenger recipe, what its folds consumed (evidence), the figures (paired rows, evenings,
difference in next-day accuracy, its date-clustered standard error and p-value, the smallest difference
it could detect) and the level it was judged at. The k-th judgement on overlapping folds is judged at
alpha * 6 / (pi^2 k^2), as the per-ticker trials ledger does. The table starts empty; nothing else changes.

Revision ID: 0035
Revises: 0034
"""

import sqlalchemy as sa
from alembic import op

revision = "0035"
down_revision = "0034"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "universe_trials",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("recipe", sa.String(32), nullable=False),
        sa.Column("config_signature", sa.String(64), nullable=False),
        sa.Column("evidence_key", sa.String(64), nullable=False),
        sa.Column("cutoffs", sa.Text(), nullable=False),
        sa.Column("tickers", sa.Integer(), nullable=False),
        sa.Column("rows", sa.Integer(), nullable=False),
        sa.Column("evenings", sa.Integer(), nullable=False),
        sa.Column("difference", sa.Float(), nullable=True),
        sa.Column("std_error", sa.Float(), nullable=True),
        sa.Column("p_value", sa.Float(), nullable=True),
        sa.Column("detectable", sa.Float(), nullable=True),
        sa.Column("trials", sa.Integer(), nullable=False),
        sa.Column("alpha_adjusted", sa.Float(), nullable=False),
        sa.Column("decision", sa.String(24), nullable=False),
        sa.Column("judged_at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("config_signature", "evidence_key", name="uq_universe_trials_evidence"),
    )


def downgrade() -> None:
    op.drop_table("universe_trials")
