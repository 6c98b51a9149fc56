"""Accountability integrity: in-sample flag, chain anchors, backtest config, one scored row per evening

- snapshots.in_sample: a replayed evening whose next-day target is on or before the model's data cutoff.
- run_log.chain_heads_json: the per-ticker chain head after each predict run (the audit's anchors).
- backtest_folds.config_signature / data_start / data_end: which config on which data a backtest ran.
- accuracy_30d is rebuilt: exactly one row per (ticker, run_date), the first recorded (lowest id, what
  was published), out-of-sample rows only. accuracy_30d_with_in_sample scores the same first rows with
  the in-sample ones kept (shown on request). accuracy_30d_by_model scores each model version on its
  own out-of-sample rows (a per-model report, never mixed into the ticker leaderboard).

Revision ID: 0005
Revises: 0004
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

Z = 1.96  # 95% Wilson interval

# {keys}: the grouping columns; {scored}: which snapshot rows count.
VIEW_SQL = """
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

# The first recorded row of each (ticker, evening): what was published, whatever was predicted later.
FIRST_OF_EVENING = "s.id IN (SELECT MIN(f.id) FROM snapshots f GROUP BY f.ticker, f.run_date)"
OUT_OF_SAMPLE = "NOT s.in_sample"

VIEWS = {
    "accuracy_30d": (("ticker",), f"{FIRST_OF_EVENING} AND {OUT_OF_SAMPLE}"),
    "accuracy_30d_with_in_sample": (("ticker",), FIRST_OF_EVENING),
    "accuracy_30d_by_model": (("ticker", "model_version"), OUT_OF_SAMPLE),
}


def create_view_sql(name: str, dialect: str) -> str:
    keys, scored = VIEWS[name]
    window_start = "latest.d - 29" if dialect == "postgresql" else "date(latest.d, '-29 days')"
    return VIEW_SQL.format(
        name=name,
        keys=", ".join(keys),
        s_keys=", ".join(f"s.{k}" for k in keys),
        scored=scored,
        window_start=window_start,
        z=Z,
        z2=Z * Z,
    )


# 0004's accuracy_30d, which the downgrade restores: 0004's VIEW_SQL and rendering, copied here when
# this migration stopped loading 0004's module (issue 39). A migration is frozen as written: never edit.
VIEW_SQL_0004 = """
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


def create_view_sql_0004(dialect: str) -> str:
    window_start = "latest.d - 29" if dialect == "postgresql" else "date(latest.d, '-29 days')"
    return VIEW_SQL_0004.format(window_start=window_start, z=Z, z2=Z * Z)


def upgrade() -> None:
    # The old view reads snapshots: drop it before touching the table (SQLite re-checks views on ALTER).
    op.execute("DROP VIEW IF EXISTS accuracy_30d")
    op.add_column(
        "snapshots", sa.Column("in_sample", sa.Boolean(), nullable=False, server_default=sa.false())
    )
    op.add_column("run_log", sa.Column("chain_heads_json", sa.Text(), nullable=True))
    op.add_column("backtest_folds", sa.Column("config_signature", sa.String(length=64), nullable=True))
    op.add_column("backtest_folds", sa.Column("data_start", sa.Date(), nullable=True))
    op.add_column("backtest_folds", sa.Column("data_end", sa.Date(), nullable=True))
    dialect = op.get_bind().dialect.name
    for name in VIEWS:
        op.execute(create_view_sql(name, dialect))


def downgrade() -> None:
    for name in VIEWS:
        op.execute(f"DROP VIEW IF EXISTS {name}")
    with op.batch_alter_table("backtest_folds") as b:
        b.drop_column("data_end")
        b.drop_column("data_start")
        b.drop_column("config_signature")
    with op.batch_alter_table("run_log") as b:
        b.drop_column("chain_heads_json")
    with op.batch_alter_table("snapshots") as b:
        b.drop_column("in_sample")
    # 0004's view comes back with 0004's own definition.
    op.execute(create_view_sql_0004(op.get_bind().dialect.name))
