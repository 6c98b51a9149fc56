"""snapshots.baseline_calls: each board baseline's call, recorded with the prediction (chain version 3)

A JSON object {baseline: +1 / -1 / 0, or null for no call} written at predict time from the closes up
to the run date (ldtm_core.scoring.baselines) and covered by the row hash from chain version 3 on, so
the board scores the call that was made that evening and never re-reads prices: a price revised later
cannot change it. NULL on rows written before this revision; the board scores those from the row's
own recorded closes, as before.

Revision ID: 0032
Revises: 0031
"""

import sqlalchemy as sa
from alembic import op

from ldtm_core.accuracy_views import HORIZONS_0021, VIEW_NAMES, create_view_sql

revision = "0032"
down_revision = "0031"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("snapshots", sa.Column("baseline_calls", sa.Text(), nullable=True))


def downgrade() -> None:
    # PostgreSQL expands a view's `s.*` when the view is created: views recreated after this revision
    # (0034's downgrade) depend on the column, so they are rebuilt around the drop, as 0026 made them.
    for name in VIEW_NAMES:
        op.execute(f"DROP VIEW IF EXISTS {name}")
    # In place on both (SQLite >= 3.35): a batch copy of snapshots would have to rebuild its views.
    op.execute("ALTER TABLE snapshots DROP COLUMN baseline_calls")
    dialect = op.get_bind().dialect.name
    for name in VIEW_NAMES:
        op.execute(create_view_sql(name, dialect, "0026", HORIZONS_0021))
