"""The board reads the dated universe: accuracy views score a row only on an evening its ticker was a member

With a membership history (universe_membership, 0033), a snapshot row recorded on an evening its ticker
was not a member of the universe (it had left, or was never in it) is no longer scored by the accuracy
views; the board names how many such rows it leaves out. With no history (the table empty, as every store
is after 0033) every row counts exactly as before: the views' figures are unchanged. No row is changed
or removed; only the eight accuracy views are recreated.

Revision ID: 0034
Revises: 0033
"""

from alembic import op

from ldtm_core.accuracy_views import recreate_views_sql

revision = "0034"
down_revision = "0033"
branch_labels = None
depends_on = None


def _recreate(version: str) -> None:
    for sql in recreate_views_sql(op.get_bind().dialect.name, version):
        op.execute(sql)


def upgrade() -> None:
    _recreate("0034")


def downgrade() -> None:
    _recreate("0026")
