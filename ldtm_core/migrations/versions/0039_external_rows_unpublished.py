"""The accuracy views never publish a submitted model's rows (model_status 'external'), as they never publish a shadow's

A model LDTM cannot run submits its forecasts (`ldtm submit`); until it is promoted to publish a ticker its
rows are recorded with `model_status = 'external'`, which, like a shadow row, is never an evening's published
forecast. The eight accuracy views are recreated so that an evening's first row is chosen among the rows
that are neither 'shadow' nor 'external' (before: not 'shadow'). No store written before this revision holds
an 'external' row, so every view's figures are unchanged; no row is changed or removed. The downgrade puts
0034's views back (it refuses nothing, but an 'external' row would then count as published: downgrade only a
store with no submissions).

Revision ID: 0039
Revises: 0038
"""

from alembic import op

from ldtm_core.accuracy_views import recreate_views_sql

revision = "0039"
down_revision = "0038"
branch_labels = None
depends_on = None


def _recreate(version: str) -> None:
    for sql in recreate_views_sql(op.get_bind().dialect.name, version):
        op.execute(sql)


def upgrade() -> None:
    _recreate("0039")


def downgrade() -> None:
    _recreate("0034")
