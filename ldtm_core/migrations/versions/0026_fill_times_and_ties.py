"""Fill time per horizon, and a zero next-day move scored as a tie (issue 28 items 5 and 11)

1. `snapshots.{next_day,next_monday,one_month}_filled_at`: when that horizon's actual was written. The
   re-fill's revision test compares a bar's `ingested_at` with its own horizon's fill time; the single
   `filled_at` (kept: the row's last fill) is bumped by every later horizon, which hid a revision of an
   earlier horizon's bar from `--refill` for good. Existing filled horizons get `filled_at`.
2. Ties: a next-day close equal to the run-date close is neither a hit nor a miss of the model or of any
   baseline. `next_day_direction_correct` is NULL on such rows (re-scored here), the accuracy views count
   them as `ties` and leave them out of `n`, hits, always-up and persistence; `backtest_folds.ties`
   counts them per fold (NULL on folds written before: unknown, scored the old way).

Revision ID: 0026
Revises: 0025
"""

import sqlalchemy as sa
from alembic import op

from ldtm_core.accuracy_views import HORIZONS_0021, VIEW_NAMES, create_view_sql

revision = "0026"
down_revision = "0025"
branch_labels = None
depends_on = None

HORIZONS = HORIZONS_0021  # the columns this revision adds a fill time to


def _create(version: str) -> None:
    dialect = op.get_bind().dialect.name
    for name in VIEW_NAMES:
        op.execute(create_view_sql(name, dialect, version, HORIZONS_0021))


def upgrade() -> None:
    for name in VIEW_NAMES:
        op.execute(f"DROP VIEW IF EXISTS {name}")
    for h in HORIZONS:
        op.add_column("snapshots", sa.Column(f"{h}_filled_at", sa.DateTime(timezone=True), nullable=True))
        # Fixed column names from HORIZONS, no user text.
        op.execute(f"UPDATE snapshots SET {h}_filled_at = filled_at WHERE {h}_actual IS NOT NULL")  # noqa: S608
    op.execute(
        "UPDATE snapshots SET next_day_direction_correct = NULL "
        "WHERE next_day_actual IS NOT NULL AND next_day_actual = run_date_close"
    )
    with op.batch_alter_table("backtest_folds") as batch:
        batch.add_column(sa.Column("ties", sa.Integer(), nullable=True))
    _create("0026")


def downgrade() -> None:
    for name in VIEW_NAMES:
        op.execute(f"DROP VIEW IF EXISTS {name}")
    with op.batch_alter_table("backtest_folds") as batch:
        batch.drop_column("ties")
    # The old rule: a tie scored by comparing signs (both 0: a hit).
    op.execute(
        "UPDATE snapshots SET next_day_direction_correct = "
        "(CASE WHEN next_day_pred = run_date_close THEN 1 ELSE 0 END) = 1 "
        "WHERE next_day_actual IS NOT NULL AND next_day_actual = run_date_close"
    )
    with op.batch_alter_table("snapshots") as batch:
        for h in HORIZONS:
            batch.drop_column(f"{h}_filled_at")
    _create("0024")
