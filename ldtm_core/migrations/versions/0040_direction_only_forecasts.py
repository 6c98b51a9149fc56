"""snapshots may hold a direction-only forecast: a horizon's predicted price may be NULL

A submitted model may forecast the next-day direction alone, or leave a horizon out (`ldtm submit`); such a
row records its `direction_pred` and NULL for each horizon it gave no price for. The three `{horizon}_pred`
columns lose their NOT NULL, and so does `fill_revisions.new_pct_error` (a re-fill of such a row logs no
error); nothing else changes: no row is rewritten, every stored row keeps its values,
hash and figures, and the append-only triggers and accuracy views stay as they were (a NULL prediction has
no pct error, and its next-day direction is scored from `direction_pred`). On PostgreSQL this is `ALTER
COLUMN ... DROP NOT NULL`; on SQLite the table's stored definition is edited in place (SQLite's documented
procedure for removing a NOT NULL constraint: the rows on disk are unchanged, so no copy of the table). The
downgrade puts NOT NULL back and refuses while any row holds a NULL prediction.

Revision ID: 0040
Revises: 0039
"""

import re

from alembic import op
from sqlalchemy import text

# ruff: noqa: S608 - the SQL below is built from this file's constant column names only

revision = "0040"
down_revision = "0039"
branch_labels = None
depends_on = None

PREDS = ("next_day_pred", "next_monday_pred", "one_month_pred")
# {table: its columns that become nullable}: a re-fill of a row with no price logs no new pct error either.
COLUMNS = {"snapshots": PREDS, "fill_revisions": ("new_pct_error",)}


def _sqlite_table_sql(conn, table: str, rewrite) -> None:
    """Edit `table`'s CREATE TABLE text in sqlite_master (writable_schema), bumping schema_version so every
    connection re-reads it; refuses unless each column's definition was found exactly once."""
    old = conn.execute(
        text("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = :t"), {"t": table}
    ).scalar_one()
    new = old
    for col in COLUMNS[table]:
        new, n = rewrite(col, new)
        if n != 1:
            raise RuntimeError(f"revision 0040: {table}.{col}'s definition not found once in {old!r}")
    version = conn.execute(text("PRAGMA schema_version")).scalar_one()
    conn.execute(text("PRAGMA writable_schema = ON"))
    conn.execute(
        text("UPDATE sqlite_master SET sql = :sql WHERE type = 'table' AND name = :t"),
        {"sql": new, "t": table},
    )
    conn.execute(text(f"PRAGMA schema_version = {int(version) + 1}"))
    conn.execute(text("PRAGMA writable_schema = OFF"))
    bad = conn.execute(text("PRAGMA quick_check")).scalar_one()
    if bad != "ok":
        raise RuntimeError(f"revision 0040: SQLite's quick_check after the edit says {bad!r}")


def upgrade() -> None:
    conn = op.get_bind()
    for table, cols in COLUMNS.items():
        if conn.dialect.name == "sqlite":
            _sqlite_table_sql(
                conn,
                table,
                lambda col, sql: re.subn(rf"(\b{col}\s+FLOAT)\s+NOT\s+NULL", r"\1", sql, flags=re.IGNORECASE),
            )
            continue
        for col in cols:
            op.alter_column(table, col, nullable=True)


def downgrade() -> None:
    conn = op.get_bind()
    nulls = conn.execute(
        text("SELECT COUNT(*) FROM snapshots WHERE " + " OR ".join(f"{c} IS NULL" for c in PREDS))
    ).scalar_one()
    nulls += conn.execute(
        text("SELECT COUNT(*) FROM fill_revisions WHERE new_pct_error IS NULL")
    ).scalar_one()
    if nulls:
        raise RuntimeError(
            f"revision 0040 downgrade: {nulls} snapshot row(s) hold a direction-only or partial forecast "
            "(a NULL prediction, or its re-fill); the previous schema cannot hold them, and a recorded row is never removed"
        )
    for table, cols in COLUMNS.items():
        if conn.dialect.name == "sqlite":
            _sqlite_table_sql(
                conn,
                table,
                lambda col, sql: re.subn(
                    rf"(\b{col}\s+FLOAT)(?=\s*[,)])", r"\1 NOT NULL", sql, flags=re.IGNORECASE
                ),
            )
            continue
        for col in cols:
            op.alter_column(table, col, nullable=False)
