"""accuracy_30d: the rolling leaderboard view (SPEC §9) on SQLite and PostgreSQL

Window: the 30 calendar days of filled snapshots ending at the latest filled run_date (data time, so
replays and tests see a full window). One row per (ticker, mode) plus (ticker, 'all').

Revision ID: 0004
Revises: 0003
"""

from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

Z = 1.96  # 95% Wilson interval

VIEW_SQL = """
CREATE VIEW accuracy_30d AS
WITH latest AS (
    SELECT MAX(run_date) AS d FROM snapshots WHERE next_day_actual IS NOT NULL
),
win AS (
    SELECT s.ticker, s.mode,
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
    FROM snapshots s CROSS JOIN latest
    WHERE s.next_day_actual IS NOT NULL
      AND s.run_date <= latest.d
      AND s.run_date >= {window_start}
),
tagged AS (
    SELECT ticker, mode, hit, up_hit, persist_hit, nd_err, nm_err, om_err, run_date FROM win
    UNION ALL
    SELECT ticker, 'all' AS mode, hit, up_hit, persist_hit, nd_err, nm_err, om_err, run_date FROM win
),
agg AS (
    SELECT ticker, mode, COUNT(*) AS n, SUM(hit) AS hits, SUM(up_hit) AS up_hits,
           SUM(persist_hit) AS persist_hits,
           AVG(nd_err) AS next_day_mape, AVG(nm_err) AS next_monday_mape, AVG(om_err) AS one_month_mape,
           MIN(run_date) AS window_start, MAX(run_date) AS window_end
    FROM tagged GROUP BY ticker, mode
)
SELECT ticker, mode, n, hits,
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


def upgrade() -> None:
    dialect = op.get_bind().dialect.name
    window_start = "latest.d - 29" if dialect == "postgresql" else "date(latest.d, '-29 days')"
    op.execute(VIEW_SQL.format(window_start=window_start, z=Z, z2=Z * Z))


def downgrade() -> None:
    op.execute("DROP VIEW IF EXISTS accuracy_30d")
