"""The accuracy_30d views (the board's source), built from one definition for a given schema version.

Migrations call `create_view_sql(name, dialect, version, horizons)` with the version they create and
the horizons the schema had then, so an old migration keeps producing exactly the objects it always
produced (tests/test_horizons.py pins them) while a new one asks for the new shape. Versions:

- "0021": rows predicted by a model that never passed the gate are left out of the default views
  (`_with_ungated` variants keep them); every view gets `ungated_n`.
- "0024": shadow rows are dropped before an evening's first row is chosen, and in the per-model views.
- "0026": the tie rule: a zero next-day move is counted in `ties`, apart from `n`, and scored by nobody.
- "0034": a dated universe: with a membership history (universe_membership), a row is scored only on an
  evening its ticker was a member; with no history every row counts, as before.
- "0039": a submitted model's rows (`model_status = 'external'`, not promoted) are never published either:
  they are dropped with the shadow rows (registry.UNPUBLISHED).

The direction horizon (ldtm_core.horizons.DIRECTION) gives the window, hits and baselines; every other
horizon adds its own 30-day window of |pct error| (`{name}_mape`, `{name}_n`).
"""

from __future__ import annotations

from collections.abc import Sequence

from ldtm_core.horizons import BY_NAME, DIRECTION, Horizon

VERSIONS = ("0021", "0024", "0026", "0034", "0039")
CURRENT = VERSIONS[-1]  # what the newest migration creates: code that reads the views' selection uses it
# The horizons of the schema from 0021 to 0026: what those migrations build their views with.
HORIZONS_0021 = ("next_day", "next_monday", "one_month")

Z = 1.96  # 95% Wilson interval

# The first recorded row of each (ticker, evening): what was published, whatever was predicted later.
FIRST_OF_EVENING = "s.id IN (SELECT MIN(f.id) FROM snapshots f GROUP BY f.ticker, f.run_date)"
OUT_OF_SAMPLE = "NOT s.in_sample"
# Predicted by an active model, i.e. one that passed the gate. A candidate serves a ticker with no
# active model; its evenings are ungated (an evening whose first row was ungated stays unscored).
GATED = "s.model_status = 'active'"
# 0024: a shadow row is never the published forecast.
NOT_SHADOW = "s.model_status <> 'shadow'"
FIRST_PUBLISHED = "s.id IN (SELECT MIN(f.id) FROM snapshots f WHERE f.model_status <> 'shadow' GROUP BY f.ticker, f.run_date)"
# 0034: the ticker was a member of the universe on the evening (everyone, while no history is stored).
MEMBER = (
    "(NOT EXISTS (SELECT 1 FROM universe_membership) OR EXISTS (SELECT 1 FROM universe_membership m "
    "WHERE m.ticker = s.ticker AND m.start_date <= s.run_date AND (m.end_date IS NULL OR s.run_date <= m.end_date)))"
)
# The same choices among the rows of run_date >= :since only (bounded_select_sql): the first row of an
# evening is the same, since every row of that (ticker, run_date) shares its run_date. `{f}` is the
# table: on SQLite, whose planner has no statistics and would scan the whole (ticker, ...) index for the
# GROUP BY, it names the run_date index.
FIRST_OF_EVENING_SINCE = (
    "s.id IN (SELECT MIN(f.id) FROM {f} WHERE f.run_date >= :since GROUP BY f.ticker, f.run_date)"
)
FIRST_PUBLISHED_SINCE = (
    "s.id IN (SELECT MIN(f.id) FROM {f} WHERE f.model_status <> 'shadow' AND f.run_date >= :since "
    "GROUP BY f.ticker, f.run_date)"
)
# 0039: what 0024 said of shadow rows, said of every unpublished status (registry.UNPUBLISHED).
_SHADOW_ONLY = "model_status <> 'shadow'"
_UNPUBLISHED = "model_status NOT IN ('shadow', 'external')"

# name: (grouping keys, which snapshot rows are scored) as of 0021
_VIEWS_0021 = {
    "accuracy_30d": (("ticker",), f"{FIRST_OF_EVENING} AND {OUT_OF_SAMPLE} AND {GATED}"),
    "accuracy_30d_with_in_sample": (("ticker",), f"{FIRST_OF_EVENING} AND {GATED}"),
    "accuracy_30d_with_ungated": (("ticker",), f"{FIRST_OF_EVENING} AND {OUT_OF_SAMPLE}"),
    "accuracy_30d_with_in_sample_and_ungated": (("ticker",), FIRST_OF_EVENING),
    "accuracy_30d_by_model": (("ticker", "model_version"), f"{OUT_OF_SAMPLE} AND {GATED}"),
    "accuracy_30d_by_model_with_in_sample": (("ticker", "model_version"), GATED),
    "accuracy_30d_by_model_with_ungated": (("ticker", "model_version"), OUT_OF_SAMPLE),
    "accuracy_30d_by_model_with_in_sample_and_ungated": (("ticker", "model_version"), "1 = 1"),
}
VIEW_NAMES = tuple(_VIEWS_0021)


def views(version: str) -> dict[str, tuple[tuple[str, ...], str]]:
    """{view name: (grouping keys, scored-rows condition)} as of `version`."""
    _check(version)
    if version == "0021":
        return dict(_VIEWS_0021)
    out = {}
    for name, (keys, scored) in _VIEWS_0021.items():
        scored = scored.replace(FIRST_OF_EVENING, FIRST_PUBLISHED)
        scored = scored if FIRST_PUBLISHED in scored else f"{scored} AND {NOT_SHADOW}"
        scored = f"{scored} AND {MEMBER}" if version >= "0034" else scored
        out[name] = (keys, scored.replace(_SHADOW_ONLY, _UNPUBLISHED) if version >= "0039" else scored)
    return out


def _check(version: str) -> None:
    if version not in VERSIONS:
        raise ValueError(f"accuracy views: unknown version {version!r} (known: {', '.join(VERSIONS)})")


# The direction horizon's window, before (0021, 0024) and with (0026) the tie rule. `{dn}` is the
# divisor of every rate: `a.n`, or NULLIF(a.n, 0) where a window may hold ties only.
_WIN = """win AS (
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
           CASE WHEN s.model_status = 'active' THEN 0 ELSE 1 END AS ungated,
           s.run_date
    FROM scored s CROSS JOIN latest
    WHERE s.next_day_actual IS NOT NULL
      AND s.run_date <= latest.d
      AND s.run_date >= {d_start}
),
tagged AS (
    SELECT {keys}, mode, hit, up_hit, has_prev, persist_hit, nd_err, ungated, run_date FROM win
    UNION ALL
    SELECT {keys}, 'all' AS mode, hit, up_hit, has_prev, persist_hit, nd_err, ungated, run_date FROM win
),
agg AS (
    SELECT {keys}, mode, COUNT(*) AS n, SUM(hit) AS hits, SUM(up_hit) AS up_hits,
           SUM(has_prev) AS persist_n, SUM(persist_hit) AS persist_hits,
           AVG(nd_err) AS next_day_mape, SUM(ungated) AS ungated_n,
           MIN(run_date) AS window_start, MAX(run_date) AS window_end
    FROM tagged GROUP BY {keys}, mode
),
"""

_WIN_TIES = """win AS (
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
"""

# One more horizon's window of |pct error|, 30 days ending at its latest filled target date.
_HORIZON = """{a}_win AS (
    SELECT {s_keys}, s.mode, ABS(s.{h}_pct_error) AS err
    FROM scored s CROSS JOIN latest
    WHERE s.{h}_pct_error IS NOT NULL
      AND s.{h}_date <= latest.{a}
      AND s.{h}_date >= {start}
),
{a}_agg AS (
    SELECT {keys}, mode, COUNT(*) AS h_n, AVG(err) AS h_mape FROM (
        SELECT {keys}, mode, err FROM {a}_win
        UNION ALL
        SELECT {keys}, 'all' AS mode, err FROM {a}_win
    ) t GROUP BY {keys}, mode
)"""

_RATES = """SELECT {a_keys}, a.mode, a.n, a.hits,
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
"""


def create_view_sql(name: str, dialect: str, version: str, horizons: Sequence[str] = HORIZONS_0021) -> str:
    """The CREATE VIEW statement of accuracy view `name` on `dialect` ("postgresql" or SQLite) as of
    schema `version`, for the snapshot columns of `horizons` (names; the first is the direction one)."""
    return f"\nCREATE VIEW {name} AS\n" + _select_sql(name, dialect, version, horizons, bounded=False)


def recreate_views_sql(dialect: str, version: str, horizons: Sequence[str] = HORIZONS_0021) -> list[str]:
    """Every accuracy view dropped, then created as of `version`: what a migration that redefines them runs."""
    drops = [f"DROP VIEW IF EXISTS {name}" for name in VIEW_NAMES]
    return drops + [create_view_sql(name, dialect, version, horizons) for name in VIEW_NAMES]


# The views' latest dates, one column each in a bounded read: `latest_{horizon name}`.
LATEST_PREFIX = "latest_"


def bounded_select_sql(
    name: str, dialect: str, version: str = VERSIONS[-1], horizons: Sequence[str] = HORIZONS_0021
) -> str:
    """View `name`'s SELECT restricted to snapshot rows with `run_date >= :since` (a bound parameter),
    with the view's latest dates added (`latest_{horizon}`): the board reads this instead of the view so
    that its cost does not grow with the stored years. It equals the view's rows when every row the view
    uses has run_date >= :since, which the caller checks with those latest dates (leaderboard._read).
    Each evening's first row is chosen among the same (ticker, run_date) rows as in the view, since the
    bound is on run_date itself."""
    return _select_sql(name, dialect, version, horizons, bounded=True)


def _select_sql(name: str, dialect: str, version: str, horizons: Sequence[str], *, bounded: bool) -> str:
    keys, scored = views(version)[name]
    hs: list[Horizon] = [BY_NAME[h] for h in horizons]
    if hs[0] != DIRECTION:
        raise ValueError(f"accuracy views: the first horizon must be {DIRECTION.name}, got {hs[0].name}")
    others = hs[1:]
    ties = version >= "0026"

    def start(col: str) -> str:  # 30 calendar days ending at `col`, inclusive
        return f"{col} - 29" if dialect == "postgresql" else f"date({col}, '-29 days')"

    def join(alias: str) -> str:
        return " AND ".join(f"a.{k} = {alias}.{k}" for k in (*keys, "mode"))

    fill = {
        "keys": ", ".join(keys),
        "s_keys": ", ".join(f"s.{k}" for k in keys),
        "a_keys": ", ".join(f"a.{k}" for k in keys),
    }
    latest = ["(SELECT MAX(run_date) FROM scored WHERE next_day_actual IS NOT NULL) AS d"] + [
        f"(SELECT MAX({h.name}_date) FROM scored WHERE {h.name}_pct_error IS NOT NULL) AS {h.alias}"  # noqa: S608
        for h in others
    ]
    if bounded:
        f = "snapshots f INDEXED BY ix_snapshots_run_date" if dialect == "sqlite" else "snapshots f"
        scored = scored.replace(FIRST_OF_EVENING, FIRST_OF_EVENING_SINCE.format(f=f))
        for first in (FIRST_PUBLISHED, FIRST_PUBLISHED.replace(_SHADOW_ONLY, _UNPUBLISHED)):
            scored = scored.replace(first, FIRST_PUBLISHED_SINCE.format(f=f))
        scored = f"s.run_date >= :since AND {scored}"
        if version >= "0039":  # the bounded first-row choice, as views() makes the unbounded one
            scored = scored.replace(_SHADOW_ONLY, _UNPUBLISHED)
    # Only fixed names (views, horizons, columns) are formatted in: no user text reaches this SQL.
    sql = f"WITH scored AS (\n    SELECT s.* FROM snapshots s WHERE {scored}\n),\n"  # noqa: S608
    sql += "latest AS (\n    SELECT " + ",\n           ".join(latest) + "\n),\n"
    sql += (_WIN_TIES if ties else _WIN).format(d_start=start("latest.d"), **fill)
    sql += ",\n".join(
        _HORIZON.format(a=h.alias, h=h.name, start=start(f"latest.{h.alias}"), **fill) for h in others
    )
    sql += "\n" + _RATES.format(dn="NULLIF(a.n, 0)" if ties else "a.n", z=Z, z2=Z * Z, **fill)
    for h in others:
        sql += f"       CAST({h.alias}.h_mape AS FLOAT) AS {h.name}_mape,\n"
        sql += f"       COALESCE({h.alias}.h_n, 0) AS {h.name}_n,\n"
    sql += "       a.ungated_n,\n"
    if ties:
        sql += "       a.ties,\n"
    if bounded:
        sql += f"       latest.d AS {LATEST_PREFIX}{hs[0].name},\n"
        sql += "".join(f"       latest.{h.alias} AS {LATEST_PREFIX}{h.name},\n" for h in others)
    sql += "       a.window_start, a.window_end\nFROM agg a\n"
    for h in others:
        sql += f"LEFT JOIN {h.alias}_agg {h.alias} ON {join(h.alias)}\n"
    if bounded:
        sql += "CROSS JOIN latest\n"
    return sql
