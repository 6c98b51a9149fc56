"""gate_decisions: the decision word and the whole gate report (JSON), so the dashboard can show the
latest gate report per ticker (issue 21: champion vs challenger on the same rows, with its evidence).

NULL on decisions recorded before this revision.

Revision ID: 0023
Revises: 0020
"""

import sqlalchemy as sa
from alembic import op

revision = "0023"
down_revision = "0020"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("gate_decisions") as batch:
        batch.add_column(sa.Column("decision", sa.String(24), nullable=True))
        batch.add_column(sa.Column("report_json", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("gate_decisions") as batch:
        batch.drop_column("report_json")
        batch.drop_column("decision")
