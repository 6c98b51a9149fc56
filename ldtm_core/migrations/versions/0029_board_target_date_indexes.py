"""Indexes on the horizons' target dates (issue 31 item 2: the board's cost flat in stored years)

The board reads only the rows of its windows (leaderboard._read): the next-day window is found by
run_date (ix_snapshots_run_date), each other horizon's by its own target date, whose newest filled
value and whose earliest run date are looked up through these indexes instead of a scan of every
stored evening.

Revision ID: 0029
Revises: 0028
"""

from alembic import op

from ldtm_core.accuracy_views import HORIZONS_0021

revision = "0029"
down_revision = "0028"
branch_labels = None
depends_on = None

# The error-only horizons of this schema (their target-date columns); fixed names, no user text.
TARGET_DATES = tuple(f"{h}_date" for h in HORIZONS_0021[1:])


def upgrade() -> None:
    for col in TARGET_DATES:
        op.create_index(f"ix_snapshots_{col}", "snapshots", [col])


def downgrade() -> None:
    for col in TARGET_DATES:
        op.drop_index(f"ix_snapshots_{col}", table_name="snapshots")
