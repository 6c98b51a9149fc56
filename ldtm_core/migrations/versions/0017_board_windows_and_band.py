"""Leaderboard windows per horizon, persistence without a previous close, the band of each row

- snapshots.neutral_band_pct: the neutral band (in %) a row's directions were judged with (its
  prediction by predict, its actual by fillback, re-derived by the audit). NULL on rows written before
  this revision: they were judged with the default, 0.25 %.
- The accuracy_30d views are rebuilt. The next-day figures keep the evenings window (the 30 days
  ending at the newest filled evening). The next-Monday and one-month errors each get their own window:
  the 30 days ending at the newest filled target date of that horizon, with their own counts
  (`next_monday_n`, `one_month_n`). Before, they averaged the rows whose evening was in the next-day
  window, i.e. about 2 one-month rows. Persistence is scored only on rows with a previous close
  (`persistence_n`): the first row of a ticker has none and counted as a miss.
- accuracy_30d_by_model_with_in_sample: the per-model report with the in-sample rows kept.

Revision ID: 0017
Revises: 0016
"""

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None

Z = 1.96  # 95% Wilson interval

# {keys}: the grouping columns; {scored}: which snapshot rows count; {join}: agg to a horizon's agg.
VIEW_SQL = """
CREATE VIEW {name} AS
WITH scored AS (
    SELECT s.* FROM snapshots s WHERE {scored}
),
latest AS (
    SELECT (SELECT MAX(run_date) FROM scored WHERE next_day_actual IS NOT NULL) AS d,
           (SELECT MAX(next_monday_date) FROM scored WHERE next_monday_pct_error IS NOT NULL) AS nm,
           (SELECT MAX(one_month_date) FROM scored WHERE one_month_pct_error IS NOT NULL) AS om
),
win AS (
    SELECT {s_keys}, s.mode,
           CASE WHEN s.next_day_direction_correct THEN 1 ELSE 0 END AS hit,
           CASE WHEN s.next_day_actual > s.run_date_close THEN 1 ELSE 0 END AS up_hit,
           CASE WHEN s.prev_close IS NOT NULL THEN 1 ELSE 0 END AS has_prev,
           CASE WHEN s.prev_close IS NOT NULL AND (
                    (s.run_date_close > s.prev_close AND s.next_day_actual > s.run_date_close)
                 OR (s.run_date_close < s.prev_close AND s.next_day_actual < s.run_date_close)
                 OR (s.run_date_close = s.prev_close AND s.next_day_actual = s.run_date_close))
                THEN 1 ELSE 0 END AS persist_hit,
           ABS(s.next_day_pct_error) AS nd_err,
           s.run_date
    FROM scored s CROSS JOIN latest
    WHERE s.next_day_actual IS NOT NULL
      AND s.run_date <= latest.d
      AND s.run_date >= {d_start}
),
tagged AS (
    SELECT {keys}, mode, hit, up_hit, has_prev, persist_hit, nd_err, run_date FROM win
    UNION ALL
    SELECT {keys}, 'all' AS mode, hit, up_hit, has_prev, persist_hit, nd_err, run_date FROM win
),
agg AS (
    SELECT {keys}, mode, COUNT(*) AS n, SUM(hit) AS hits, SUM(up_hit) AS up_hits,
           SUM(has_prev) AS persist_n, SUM(persist_hit) AS persist_hits,
           AVG(nd_err) AS next_day_mape,
           MIN(run_date) AS window_start, MAX(run_date) AS window_end
    FROM tagged GROUP BY {keys}, mode
),
nm_win AS (
    SELECT {s_keys}, s.mode, ABS(s.next_monday_pct_error) AS err
    FROM scored s CROSS JOIN latest
    WHERE s.next_monday_pct_error IS NOT NULL
      AND s.next_monday_date <= latest.nm
      AND s.next_monday_date >= {nm_start}
),
nm_agg AS (
    SELECT {keys}, mode, COUNT(*) AS h_n, AVG(err) AS h_mape FROM (
        SELECT {keys}, mode, err FROM nm_win
        UNION ALL
        SELECT {keys}, 'all' AS mode, err FROM nm_win
    ) t GROUP BY {keys}, mode
),
om_win AS (
    SELECT {s_keys}, s.mode, ABS(s.one_month_pct_error) AS err
    FROM scored s CROSS JOIN latest
    WHERE s.one_month_pct_error IS NOT NULL
      AND s.one_month_date <= latest.om
      AND s.one_month_date >= {om_start}
),
om_agg AS (
    SELECT {keys}, mode, COUNT(*) AS h_n, AVG(err) AS h_mape FROM (
        SELECT {keys}, mode, err FROM om_win
        UNION ALL
        SELECT {keys}, 'all' AS mode, err FROM om_win
    ) t GROUP BY {keys}, mode
)
SELECT {a_keys}, a.mode, a.n, a.hits,
       CAST(1.0 * a.hits / a.n AS FLOAT) AS direction_accuracy,
       CAST(((1.0 * a.hits / a.n) + {z2} / (2.0 * a.n)) / (1.0 + {z2} / a.n)
            - {z} * SQRT((1.0 * a.hits / a.n) * (1.0 - 1.0 * a.hits / a.n) / a.n + {z2} / (4.0 * a.n * a.n))
              / (1.0 + {z2} / a.n)
            AS FLOAT) AS wilson_low,
       CAST(((1.0 * a.hits / a.n) + {z2} / (2.0 * a.n)) / (1.0 + {z2} / a.n)
            + {z} * SQRT((1.0 * a.hits / a.n) * (1.0 - 1.0 * a.hits / a.n) / a.n + {z2} / (4.0 * a.n * a.n))
              / (1.0 + {z2} / a.n)
            AS FLOAT) AS wilson_high,
       CAST(1.0 * a.up_hits / a.n AS FLOAT) AS always_up_accuracy,
       CAST(CASE WHEN a.persist_n > 0 THEN 1.0 * a.persist_hits / a.persist_n END AS FLOAT)
            AS persistence_accuracy,
       a.persist_n AS persistence_n,
       CAST(a.next_day_mape AS FLOAT) AS next_day_mape,
       CAST(nm.h_mape AS FLOAT) AS next_monday_mape,
       COALESCE(nm.h_n, 0) AS next_monday_n,
       CAST(om.h_mape AS FLOAT) AS one_month_mape,
       COALESCE(om.h_n, 0) AS one_month_n,
       a.window_start, a.window_end
FROM agg a
LEFT JOIN nm_agg nm ON {nm_join}
LEFT JOIN om_agg om ON {om_join}
"""

# The first recorded row of each (ticker, evening): what was published, whatever was predicted later.
FIRST_OF_EVENING = "s.id IN (SELECT MIN(f.id) FROM snapshots f GROUP BY f.ticker, f.run_date)"
OUT_OF_SAMPLE = "NOT s.in_sample"

VIEWS = {
    "accuracy_30d": (("ticker",), f"{FIRST_OF_EVENING} AND {OUT_OF_SAMPLE}"),
    "accuracy_30d_with_in_sample": (("ticker",), FIRST_OF_EVENING),
    "accuracy_30d_by_model": (("ticker", "model_version"), OUT_OF_SAMPLE),
    "accuracy_30d_by_model_with_in_sample": (("ticker", "model_version"), "1 = 1"),
}


def create_view_sql(name: str, dialect: str) -> str:
    keys, scored = VIEWS[name]

    def start(col: str) -> str:  # 30 calendar days ending at `col`, inclusive
        return f"{col} - 29" if dialect == "postgresql" else f"date({col}, '-29 days')"

    def join(alias: str) -> str:
        return " AND ".join(f"a.{k} = {alias}.{k}" for k in (*keys, "mode"))

    return VIEW_SQL.format(
        name=name,
        keys=", ".join(keys),
        s_keys=", ".join(f"s.{k}" for k in keys),
        a_keys=", ".join(f"a.{k}" for k in keys),
        scored=scored,
        d_start=start("latest.d"),
        nm_start=start("latest.nm"),
        om_start=start("latest.om"),
        nm_join=join("nm"),
        om_join=join("om"),
        z=Z,
        z2=Z * Z,
    )


# 0005's accuracy views, which the downgrade restores: 0005's VIEW_SQL, VIEWS and create_view_sql,
# copied here when this migration stopped loading 0005's module (issue 39). A migration is frozen as
# written: never edit. 0005's FIRST_OF_EVENING and OUT_OF_SAMPLE are this module's, word for word.
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

VIEWS_0005 = {
    "accuracy_30d": (("ticker",), f"{FIRST_OF_EVENING} AND {OUT_OF_SAMPLE}"),
    "accuracy_30d_with_in_sample": (("ticker",), FIRST_OF_EVENING),
    "accuracy_30d_by_model": (("ticker", "model_version"), OUT_OF_SAMPLE),
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


def _drop_views() -> None:
    for name in VIEWS:
        op.execute(f"DROP VIEW IF EXISTS {name}")


def upgrade() -> None:
    # The views read snapshots: drop them before touching the table (SQLite re-checks views on ALTER).
    _drop_views()
    with op.batch_alter_table("snapshots") as b:
        b.add_column(sa.Column("neutral_band_pct", sa.Float(), nullable=True))
    dialect = op.get_bind().dialect.name
    for name in VIEWS:
        op.execute(create_view_sql(name, dialect))


def downgrade() -> None:
    _drop_views()
    with op.batch_alter_table("snapshots") as b:
        b.drop_column("neutral_band_pct")
    # 0005's views come back with 0005's own definitions.
    dialect = op.get_bind().dialect.name
    for name in VIEWS_0005:
        op.execute(create_view_sql_0005(name, dialect))
