"""backtest_folds: the discordant rows of model vs always-up, for the exact skill test (ldtm_core.accountability.skill)

`model_only_hits`: test rows where the model's direction was right and always-up's wrong;
`up_only_hits`: the reverse. NULL on folds written before this revision (their p-value is unknown).

Revision ID: 0013
Revises: 0009
"""

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("backtest_folds") as batch:
        batch.add_column(sa.Column("model_only_hits", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("up_only_hits", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("backtest_folds") as batch:
        batch.drop_column("up_only_hits")
        batch.drop_column("model_only_hits")
