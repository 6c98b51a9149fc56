"""snapshots fillfactor 40 on PostgreSQL: fills are written in place (issue 31 item 2)

A fill changes no indexed column, so PostgreSQL can write it as a HOT update (the new row version on the
same page, no new entry in any of the table's indexes) if the page has room for it. Packed full
(fillfactor 100), every fill moved its row and wrote an entry in each index (four then, seven since
0029): ~75 % of a 1,000 x 250 catch-up fillback went into those index writes and their WAL. One
evening's rows lie together and fill in the same statement, so a page must hold all its rows twice: a
row grows from ~340 to ~440 bytes when all three horizons fill, and at 40 % a page takes 9 rows
(3.1 KiB) and keeps 5 KiB for their new versions (45 % let a tenth row in, which then moved). Later
fills find the old versions pruned. The price: the heap takes ~2.7 times the pages of a packed one
(the indexes do not grow). Pages written before this revision stay packed (`VACUUM FULL snapshots`
repacks them); rows written from now on get the room. SQLite has no fillfactor: nothing to do there.

Revision ID: 0030
Revises: 0029
"""

from alembic import op

revision = "0030"
down_revision = "0029"
branch_labels = None
depends_on = None


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("ALTER TABLE snapshots SET (fillfactor = 40)")


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("ALTER TABLE snapshots RESET (fillfactor)")
