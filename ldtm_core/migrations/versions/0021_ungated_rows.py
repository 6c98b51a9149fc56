"""Ungated rows: the accuracy_30d views leave out rows predicted by a model that never passed the gate

A ticker with no active model is predicted by its newest candidate (`snapshots.model_status` =
'candidate'). Those rows are ungated: the default views (accuracy_30d, accuracy_30d_with_in_sample,
accuracy_30d_by_model, accuracy_30d_by_model_with_in_sample) now score only rows predicted by an active
model. The `_with_ungated` / `_with_in_sample_and_ungated` variants keep them, and every view gets
`ungated_n`: the ungated rows among a board row's next-day rows (0 in the default views). No table
changes; the views are dropped and recreated (0017's definitions come back on downgrade).

Revision ID: 0021
Revises: 0018
"""

from alembic import op

from ldtm_core.accuracy_views import HORIZONS_0021, VIEW_NAMES, create_view_sql

revision = "0021"
down_revision = "0018"
branch_labels = None
depends_on = None

VERSION = "0021"  # the views' shape this revision creates (ldtm_core.accuracy_views)

Z = 1.96  # 95% Wilson interval

# 0017's accuracy views, which the downgrade restores: 0017's VIEW_SQL, VIEWS and create_view_sql,
# copied here when this migration stopped loading 0017's module (issue 39). A migration is frozen as
# written: never edit.
VIEW_SQL_0017 = """
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

FIRST_OF_EVENING_0017 = "s.id IN (SELECT MIN(f.id) FROM snapshots f GROUP BY f.ticker, f.run_date)"
OUT_OF_SAMPLE_0017 = "NOT s.in_sample"

VIEWS_0017 = {
    "accuracy_30d": (("ticker",), f"{FIRST_OF_EVENING_0017} AND {OUT_OF_SAMPLE_0017}"),
    "accuracy_30d_with_in_sample": (("ticker",), FIRST_OF_EVENING_0017),
    "accuracy_30d_by_model": (("ticker", "model_version"), OUT_OF_SAMPLE_0017),
    "accuracy_30d_by_model_with_in_sample": (("ticker", "model_version"), "1 = 1"),
}


def create_view_sql_0017(name: str, dialect: str) -> str:
    keys, scored = VIEWS_0017[name]

    def start(col: str) -> str:  # 30 calendar days ending at `col`, inclusive
        return f"{col} - 29" if dialect == "postgresql" else f"date({col}, '-29 days')"

    def join(alias: str) -> str:
        return " AND ".join(f"a.{k} = {alias}.{k}" for k in (*keys, "mode"))

    return VIEW_SQL_0017.format(
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


def _drop_views() -> None:
    for name in VIEW_NAMES:
        op.execute(f"DROP VIEW IF EXISTS {name}")


def upgrade() -> None:
    _drop_views()  # 0017's four names are among these
    dialect = op.get_bind().dialect.name
    for name in VIEW_NAMES:
        op.execute(create_view_sql(name, dialect, VERSION, HORIZONS_0021))


def downgrade() -> None:
    _drop_views()
    dialect = op.get_bind().dialect.name
    for name in VIEWS_0017:
        op.execute(create_view_sql_0017(name, dialect))
