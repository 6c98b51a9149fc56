"""Fill time per horizon, and a zero next-day move scored as a tie (issue 28 items 5 and 11)

1. `snapshots.{next_day,next_monday,one_month}_filled_at`: when that horizon's actual was written. The
   re-fill's revision test compares a bar's `ingested_at` with its own horizon's fill time; the single
   `filled_at` (kept: the row's last fill) is bumped by every later horizon, which hid a revision of an
   earlier horizon's bar from `--refill` for good. Existing filled horizons get `filled_at`.
2. Ties: a next-day close equal to the run-date close is neither a hit nor a miss of the model or of any
   baseline. `next_day_direction_correct` is NULL on such rows (re-scored here), the accuracy views count
   them as `ties` and leave them out of `n`, hits, always-up and persistence; `backtest_folds.ties`
   counts them per fold (NULL on folds written before: unknown, scored the old way).

Revision ID: 0026
Revises: 0024
"""

import importlib.util
from pathlib import Path

import sqlalchemy as sa
from alembic import op

revision = "0026"
down_revision = "0025"
branch_labels = None
depends_on = None

HORIZONS = ("next_day", "next_monday", "one_month")

# 0021's view with the tie rule: `tie` rows are counted apart and scored by nobody. `{dn}` guards a
# window of ties only (n = 0: no accuracy, no division).
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
           CASE WHEN s.next_day_actual = s.run_date_close THEN 1 ELSE 0 END AS tie,
           CASE WHEN s.next_day_direction_correct AND s.next_day_actual <> s.run_date_close
                THEN 1 ELSE 0 END AS hit,
           CASE WHEN s.next_day_actual > s.run_date_close THEN 1 ELSE 0 END AS up_hit,
           CASE WHEN s.prev_close IS NOT NULL AND s.next_day_actual <> s.run_date_close
                THEN 1 ELSE 0 END AS has_prev,
           CASE WHEN s.prev_close IS NOT NULL AND (
                    (s.run_date_close > s.prev_close AND s.next_day_actual > s.run_date_close)
                 OR (s.run_date_close < s.prev_close AND s.next_day_actual < s.run_date_close))
                THEN 1 ELSE 0 END AS persist_hit,
           ABS(s.next_day_pct_error) AS nd_err,
           CASE WHEN s.model_status = 'active' THEN 0 ELSE 1 END AS ungated,
           s.run_date
    FROM scored s CROSS JOIN latest
    WHERE s.next_day_actual IS NOT NULL
      AND s.run_date <= latest.d
      AND s.run_date >= {d_start}
),
tagged AS (
    SELECT {keys}, mode, tie, hit, up_hit, has_prev, persist_hit, nd_err, ungated, run_date FROM win
    UNION ALL
    SELECT {keys}, 'all' AS mode, tie, hit, up_hit, has_prev, persist_hit, nd_err, ungated, run_date FROM win
),
agg AS (
    SELECT {keys}, mode, COUNT(*) - SUM(tie) AS n, SUM(tie) AS ties, SUM(hit) AS hits,
           SUM(up_hit) AS up_hits, SUM(has_prev) AS persist_n, SUM(persist_hit) AS persist_hits,
           AVG(nd_err) AS next_day_mape, SUM(ungated) AS ungated_n,
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
       CAST(1.0 * a.hits / {dn} AS FLOAT) AS direction_accuracy,
       CAST(((1.0 * a.hits / {dn}) + {z2} / (2.0 * {dn})) / (1.0 + {z2} / {dn})
            - {z} * SQRT((1.0 * a.hits / {dn}) * (1.0 - 1.0 * a.hits / {dn}) / {dn} + {z2} / (4.0 * {dn} * {dn}))
              / (1.0 + {z2} / {dn})
            AS FLOAT) AS wilson_low,
       CAST(((1.0 * a.hits / {dn}) + {z2} / (2.0 * {dn})) / (1.0 + {z2} / {dn})
            + {z} * SQRT((1.0 * a.hits / {dn}) * (1.0 - 1.0 * a.hits / {dn}) / {dn} + {z2} / (4.0 * {dn} * {dn}))
              / (1.0 + {z2} / {dn})
            AS FLOAT) AS wilson_high,
       CAST(1.0 * a.up_hits / {dn} AS FLOAT) AS always_up_accuracy,
       CAST(CASE WHEN a.persist_n > 0 THEN 1.0 * a.persist_hits / a.persist_n END AS FLOAT)
            AS persistence_accuracy,
       a.persist_n AS persistence_n,
       CAST(a.next_day_mape AS FLOAT) AS next_day_mape,
       CAST(nm.h_mape AS FLOAT) AS next_monday_mape,
       COALESCE(nm.h_n, 0) AS next_monday_n,
       CAST(om.h_mape AS FLOAT) AS one_month_mape,
       COALESCE(om.h_n, 0) AS one_month_n,
       a.ungated_n,
       a.ties,
       a.window_start, a.window_end
FROM agg a
LEFT JOIN nm_agg nm ON {nm_join}
LEFT JOIN om_agg om ON {om_join}
"""


def _module(file: str, name: str):
    spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name(file))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _views():
    """0024's eight views (names, keys, which rows are scored) and 0021's SQL builder."""
    v21 = _module("0021_ungated_rows.py", "ldtm_migration_0021")
    v24 = _module("0024_shadow_models.py", "ldtm_migration_0024")
    return v21, v24._views(v21)


def _create(views: dict, v21, sql: str) -> None:
    dialect = op.get_bind().dialect.name
    saved_views, saved_sql = v21.VIEWS, v21.VIEW_SQL
    # 0021's builder fills the same placeholders; `{dn}` is this revision's own.
    v21.VIEWS, v21.VIEW_SQL = views, sql.replace("{dn}", "NULLIF(a.n, 0)")
    try:
        for name in views:
            op.execute(v21.create_view_sql(name, dialect))
    finally:
        v21.VIEWS, v21.VIEW_SQL = saved_views, saved_sql


def upgrade() -> None:
    v21, views = _views()
    for name in views:
        op.execute(f"DROP VIEW IF EXISTS {name}")
    for h in HORIZONS:
        op.add_column("snapshots", sa.Column(f"{h}_filled_at", sa.DateTime(timezone=True), nullable=True))
        # Fixed column names from HORIZONS, no user text.
        op.execute(f"UPDATE snapshots SET {h}_filled_at = filled_at WHERE {h}_actual IS NOT NULL")  # noqa: S608
    op.execute(
        "UPDATE snapshots SET next_day_direction_correct = NULL "
        "WHERE next_day_actual IS NOT NULL AND next_day_actual = run_date_close"
    )
    with op.batch_alter_table("backtest_folds") as batch:
        batch.add_column(sa.Column("ties", sa.Integer(), nullable=True))
    _create(views, v21, VIEW_SQL)


def downgrade() -> None:
    v21, views = _views()
    for name in views:
        op.execute(f"DROP VIEW IF EXISTS {name}")
    with op.batch_alter_table("backtest_folds") as batch:
        batch.drop_column("ties")
    # The old rule: a tie scored by comparing signs (both 0: a hit).
    op.execute(
        "UPDATE snapshots SET next_day_direction_correct = "
        "(CASE WHEN next_day_pred = run_date_close THEN 1 ELSE 0 END) = 1 "
        "WHERE next_day_actual IS NOT NULL AND next_day_actual = run_date_close"
    )
    with op.batch_alter_table("snapshots") as batch:
        for h in HORIZONS:
            batch.drop_column(f"{h}_filled_at")
    _create(views, v21, v21.VIEW_SQL)
