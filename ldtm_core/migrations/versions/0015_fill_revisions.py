"""fill_revisions: every re-fill of a snapshot actual, with the old value and the reason (issue 20 item 1);
snapshots.chain_version: the row hash definition a row was written under (item 8b; existing rows are 1)

Revision ID: 0015
Revises: 0014
"""

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

Z = 1.96  # 95% Wilson interval

# 0005's accuracy views, which the downgrade restores: 0005's VIEW_SQL, VIEWS and create_view_sql,
# copied here when this migration stopped loading 0005's module (issue 39). A migration is frozen as
# written: never edit.
VIEW_SQL_0005 = """
CREATE VIEW {name} AS
WITH scored AS (
    SELECT s.* FROM snapshots s WHERE {scored}
),
latest AS (
    SELECT MAX(run_date) AS d FROM scored WHERE next_day_actual IS NOT NULL
),
win AS (
    SELECT {s_keys}, s.mode,
           CASE WHEN s.next_day_direction_correct THEN 1 ELSE 0 END AS hit,
           CASE WHEN s.next_day_actual > s.run_date_close THEN 1 ELSE 0 END AS up_hit,
           CASE WHEN s.prev_close IS NOT NULL AND (
                    (s.run_date_close > s.prev_close AND s.next_day_actual > s.run_date_close)
                 OR (s.run_date_close < s.prev_close AND s.next_day_actual < s.run_date_close)
                 OR (s.run_date_close = s.prev_close AND s.next_day_actual = s.run_date_close))
                THEN 1 ELSE 0 END AS persist_hit,
           ABS(s.next_day_pct_error) AS nd_err,
           ABS(s.next_monday_pct_error) AS nm_err,
           ABS(s.one_month_pct_error) AS om_err,
           s.run_date
    FROM scored s CROSS JOIN latest
    WHERE s.next_day_actual IS NOT NULL
      AND s.run_date <= latest.d
      AND s.run_date >= {window_start}
),
tagged AS (
    SELECT {keys}, mode, hit, up_hit, persist_hit, nd_err, nm_err, om_err, run_date FROM win
    UNION ALL
    SELECT {keys}, 'all' AS mode, hit, up_hit, persist_hit, nd_err, nm_err, om_err, run_date FROM win
),
agg AS (
    SELECT {keys}, mode, COUNT(*) AS n, SUM(hit) AS hits, SUM(up_hit) AS up_hits,
           SUM(persist_hit) AS persist_hits,
           AVG(nd_err) AS next_day_mape, AVG(nm_err) AS next_monday_mape, AVG(om_err) AS one_month_mape,
           MIN(run_date) AS window_start, MAX(run_date) AS window_end
    FROM tagged GROUP BY {keys}, mode
)
SELECT {keys}, mode, n, hits,
       CAST(1.0 * hits / n AS FLOAT) AS direction_accuracy,
       CAST(((1.0 * hits / n) + {z2} / (2.0 * n)) / (1.0 + {z2} / n)
            - {z} * SQRT((1.0 * hits / n) * (1.0 - 1.0 * hits / n) / n + {z2} / (4.0 * n * n)) / (1.0 + {z2} / n)
            AS FLOAT) AS wilson_low,
       CAST(((1.0 * hits / n) + {z2} / (2.0 * n)) / (1.0 + {z2} / n)
            + {z} * SQRT((1.0 * hits / n) * (1.0 - 1.0 * hits / n) / n + {z2} / (4.0 * n * n)) / (1.0 + {z2} / n)
            AS FLOAT) AS wilson_high,
       CAST(1.0 * up_hits / n AS FLOAT) AS always_up_accuracy,
       CAST(1.0 * persist_hits / n AS FLOAT) AS persistence_accuracy,
       CAST(next_day_mape AS FLOAT) AS next_day_mape,
       CAST(next_monday_mape AS FLOAT) AS next_monday_mape,
       CAST(one_month_mape AS FLOAT) AS one_month_mape,
       window_start, window_end
FROM agg
"""

FIRST_OF_EVENING_0005 = "s.id IN (SELECT MIN(f.id) FROM snapshots f GROUP BY f.ticker, f.run_date)"
OUT_OF_SAMPLE_0005 = "NOT s.in_sample"

VIEWS_0005 = {
    "accuracy_30d": (("ticker",), f"{FIRST_OF_EVENING_0005} AND {OUT_OF_SAMPLE_0005}"),
    "accuracy_30d_with_in_sample": (("ticker",), FIRST_OF_EVENING_0005),
    "accuracy_30d_by_model": (("ticker", "model_version"), OUT_OF_SAMPLE_0005),
}


def create_view_sql_0005(name: str, dialect: str) -> str:
    keys, scored = VIEWS_0005[name]
    window_start = "latest.d - 29" if dialect == "postgresql" else "date(latest.d, '-29 days')"
    return VIEW_SQL_0005.format(
        name=name,
        keys=", ".join(keys),
        s_keys=", ".join(f"s.{k}" for k in keys),
        scored=scored,
        window_start=window_start,
        z=Z,
        z2=Z * Z,
    )


def upgrade() -> None:
    op.create_table(
        "fill_revisions",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("snapshot_id", sa.Integer(), sa.ForeignKey("snapshots.id"), nullable=False),
        sa.Column("ticker", sa.String(12), nullable=False),
        sa.Column("run_date", sa.Date(), nullable=False),
        sa.Column("horizon", sa.String(12), nullable=False),
        sa.Column("old_actual", sa.Float(), nullable=False),
        sa.Column("new_actual", sa.Float(), nullable=False),
        sa.Column("old_pct_error", sa.Float()),
        sa.Column("new_pct_error", sa.Float(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("revised_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_fill_revisions_snapshot", "fill_revisions", ["snapshot_id"])
    # A plain ADD COLUMN (SQLite allows it with a constant default): a batch copy of snapshots would
    # break the views that read it.
    op.add_column(
        "snapshots", sa.Column("chain_version", sa.Integer(), nullable=False, server_default=sa.text("1"))
    )


def downgrade() -> None:
    op.drop_index("ix_fill_revisions_snapshot", table_name="fill_revisions")
    op.drop_table("fill_revisions")
    # The views select `s.*` (PostgreSQL expands it at creation, so they depend on chain_version once a
    # later revision rebuilt them): drop them around the column and restore 0005's definitions.
    for name in VIEWS_0005:
        op.execute(f"DROP VIEW IF EXISTS {name}")
    op.drop_column("snapshots", "chain_version")  # native DROP COLUMN (SQLite >= 3.35)
    dialect = op.get_bind().dialect.name
    for name in VIEWS_0005:
        op.execute(create_view_sql_0005(name, dialect))
