"""backtest_fold_baselines: one row per (fold, baseline) instead of three columns per baseline

Each gate baseline but always-up (whose figures are the fold row's own always_up_accuracy,
model_only_hits and up_only_hits) is stored per fold as a row: the rows it scored (ties out), its hits,
and the discordant rows vs the model (`model_only`: model right, baseline wrong; `base_only`: the
reverse) for the exact paired test. A new baseline (ldtm_core.scoring.baselines) then needs no column.
The upgrade copies every fold's persistence_* and trend_* figures (revision 0020) into the table; those
columns stay, NULL on folds written after it, and nothing reads them. The downgrade copies the two
baselines back into them before it drops the table (any other baseline's rows are lost).

Revision ID: 0031
Revises: 0030
"""

import sqlalchemy as sa
from alembic import op

revision = "0031"
down_revision = "0030"
branch_labels = None
depends_on = None

TABLE = "backtest_fold_baselines"
# The baselines 0020 stored as columns: {baseline: (hits, model_only, base_only) columns}.
COLUMNS = {
    "persistence": ("persistence_hits", "persistence_model_only", "persistence_only"),
    "trend": ("trend_hits", "trend_model_only", "trend_only"),
}


def upgrade() -> None:
    op.create_table(
        TABLE,
        sa.Column("backtest_id", sa.String(36), nullable=False),
        sa.Column("fold", sa.Integer(), nullable=False),
        sa.Column("baseline", sa.String(32), nullable=False),
        sa.Column("n", sa.Integer(), nullable=False),
        sa.Column("hits", sa.Integer(), nullable=False),
        sa.Column("model_only", sa.Integer(), nullable=False),
        sa.Column("base_only", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("backtest_id", "fold", "baseline", name="pk_backtest_fold_baselines"),
    )
    for name, (hits, model_only, base_only) in COLUMNS.items():
        # Fixed names only. n: the fold's scored rows, its ties out (NULL ties: written before 0026).
        op.execute(
            sa.text(
                f"INSERT INTO {TABLE} (backtest_id, fold, baseline, n, hits, model_only, base_only) "  # noqa: S608
                f"SELECT backtest_id, fold, :name, n - COALESCE(ties, 0), {hits}, {model_only}, {base_only} "
                f"FROM backtest_folds WHERE {hits} IS NOT NULL AND {model_only} IS NOT NULL "
                f"AND {base_only} IS NOT NULL"
            ).bindparams(name=name)
        )


def downgrade() -> None:
    for name, columns in COLUMNS.items():
        for column, source in zip(columns, ("hits", "model_only", "base_only"), strict=True):
            op.execute(
                sa.text(
                    f"UPDATE backtest_folds SET {column} = (SELECT b.{source} FROM {TABLE} b "  # noqa: S608
                    "WHERE b.backtest_id = backtest_folds.backtest_id AND b.fold = backtest_folds.fold "
                    f"AND b.baseline = :name) WHERE {column} IS NULL"
                ).bindparams(name=name)
            )
    op.drop_table(TABLE)
