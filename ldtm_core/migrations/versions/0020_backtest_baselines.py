"""backtest_folds: persistence and the trailing-majority baseline on the fold's rows, with their discordant rows

Per fold, for each baseline (ldtm_core.accountability.baselines): its hits on the test rows, the rows
where the model was right and the baseline wrong (`*_model_only`), and the reverse (`*_only`), for the
exact paired test. NULL on folds written before this revision (the gate reports them as unknown).

Revision ID: 0020
Revises: 0022
"""

import sqlalchemy as sa
from alembic import op

revision = "0020"
down_revision = "0022"
branch_labels = None
depends_on = None

COLUMNS = (
    "persistence_hits",
    "persistence_model_only",
    "persistence_only",
    "trend_hits",
    "trend_model_only",
    "trend_only",
)


def upgrade() -> None:
    with op.batch_alter_table("backtest_folds") as batch:
        for name in COLUMNS:
            batch.add_column(sa.Column(name, sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("backtest_folds") as batch:
        for name in reversed(COLUMNS):
            batch.drop_column(name)
