"""The leaderboard (SPEC §9): rows of the `accuracy_30d` view plus the plain verdict against always-up.

The ticker leaderboard scores exactly one prediction per (ticker, evening): the first one recorded,
i.e. what was published; a model promoted later and re-predicting the same evening does not count
twice. In-sample replays (the model's data cutoff reaches the next-day target) are left out unless
asked for. `leaderboard_by_model` is the separate per-model report: each version on its own rows.

Ungated rows (migration 0021): a ticker with no active model is predicted by a candidate that never
passed the gate. Those rows describe no production model: the boards leave them out unless
`include_ungated`, and then each board row says `gated` (False when any of its rows was ungated) and
`ungated_n`. The two flags compose.

Shadow rows (migration 0024) are never the published forecast: every board, with or without the flags
above, leaves them out before choosing an evening's first row; accountability.shadow reports them.

Windows (migration 0017): the next-day figures (accuracy, baselines, next-day error) cover the 30 days
ending at the newest filled evening; the next-Monday and one-month errors each cover the 30 days ending
at their own newest filled target date, with their own counts beside them. Persistence is scored only
on rows with a previous close (`persistence_n`).
Extra columns (e.g. a significance test) can be added to the returned frames without touching SQL.

Read at scale (issue 27, `board_stats`): "beats" is set by Benjamini-Hochberg q-values over every
(ticker, baseline) test of the board (`q_vs_always_up`, `q_vs_persistence` beside each ticker's own p),
`universe()` answers once per board whether any model beats its baseline after the search over the
tickers (Hansen's SPA), and `next_monday_dates` / `one_month_dates` say on how many distinct target dates
each horizon's rows stand (consecutive evenings share a next-Monday target).
"""

from __future__ import annotations

import datetime as dt
import math

import pandas as pd
from sqlalchemy import Engine, func, not_, select

from ldtm_core.accountability.board.reads import (
    Bounds,
    as_date,
    newest_filled_run_dates,
    next_day_rows,
    read_view,
    scored_rows,
)
from ldtm_core.errors import InputError
from ldtm_core.horizons import DIRECTION, ERROR_ONLY
from ldtm_core.learning.registry import SHADOW, serving_models
from ldtm_core.schema import snapshots
from ldtm_core.scoring import board_stats
from ldtm_core.scoring.board_stats import ALPHA, UniverseTest
from ldtm_core.scoring.skill import SkillTest, format_p_value

MODES = ("all", "live", "replay")
# The board's per-horizon columns (accuracy_views): the direction horizon's mean |pct error|, then each
# other horizon's, with the count of its own window.
HORIZON_COLUMNS = [f"{DIRECTION.name}_mape"] + [f"{h.name}_{c}" for h in ERROR_ONLY for c in ("mape", "n")]
SIGNIFICANCE = ALPHA  # the q-value (BH over the board, board_stats) the verdict calls evidence
COLUMNS = [
    "ticker",
    "mode",
    "n",
    "hits",
    "direction_accuracy",
    "wilson_low",
    "wilson_high",
    "always_up_accuracy",
    "persistence_accuracy",
    "persistence_n",
    *HORIZON_COLUMNS,
    "ungated_n",
    "window_start",
    "window_end",
]

# What a reader sees of one board row, in order: the one list the dashboard shows and the CLI follows
# (cli.accountability.board_cells: its columns come from this list, in this order; it joins some into
# one cell: "gated" beside the ticker, the Wilson bounds, "model/up only", "p (q)", "|err| (n, dates)";
# the window is in its title).
DISPLAY_COLUMNS = [
    "ticker",
    "gated",
    "n",
    "direction_accuracy",
    "wilson_low",
    "wilson_high",
    "always_up_accuracy",
    "persistence_accuracy",
    "persistence_n",
    "model_only",
    "up_only",
    "skill_p_value",
    "q_vs_always_up",
    "beats_always_up",
    "persistence_p_value",
    "q_vs_persistence",
    "beats_persistence",
    f"{DIRECTION.name}_mape",
    *(f"{h.name}_{c}" for h in ERROR_ONLY for c in ("mape", "n", "dates")),
    "window_start",
    "window_end",
]


def wilson_interval(hits: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """95% Wilson score interval for a proportion (the same formula the view uses)."""
    if n == 0:
        return (math.nan, math.nan)
    p = hits / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return centre - half, centre + half


# The views (migrations 0017, 0021): first row per evening or per model; in-sample and ungated rows
# left out unless the view's name says they are kept.
TICKER_VIEW = "accuracy_30d"
TICKER_VIEW_WITH_IN_SAMPLE = "accuracy_30d_with_in_sample"
MODEL_VIEW = "accuracy_30d_by_model"
MODEL_VIEW_WITH_IN_SAMPLE = "accuracy_30d_by_model_with_in_sample"
COUNTS = ("n", "hits", "persistence_n", *(f"{h.name}_n" for h in ERROR_ONLY), "ungated_n")
# Distinct target dates under each horizon's rows (computed in Python from the same rows as the view).
DATE_COUNTS = {h.name: f"{h.name}_dates" for h in ERROR_ONLY}
UNGATED_LEGEND = (
    "ungated: predicted by a candidate that never passed the gate (the ticker has no active model)"
)


def view_name(by_model: bool, include_in_sample: bool, include_ungated: bool) -> str:
    """The accuracy view for these choices (fixed names only: never user text)."""
    name = MODEL_VIEW if by_model else TICKER_VIEW
    if include_in_sample and include_ungated:
        return f"{name}_with_in_sample_and_ungated"
    if include_in_sample:
        return f"{name}_with_in_sample"
    return f"{name}_with_ungated" if include_ungated else name


def leaderboard(
    engine: Engine, mode: str = "all", include_in_sample: bool = False, include_ungated: bool = False
) -> pd.DataFrame:
    """One row per ticker for `mode` (all / live / replay), best direction accuracy first.

    Each (ticker, evening) counts once: its first recorded prediction. `include_in_sample` adds the
    in-sample replays back, `include_ungated` the evenings predicted by a candidate (`gated` False).
    `beats_always_up` / `beats_persistence` are True only when the model is strictly more accurate than
    the baseline on the same rows AND the Benjamini-Hochberg q-value of its one-sided exact sign test, over
    every (ticker, baseline) test of this board, is <= SIGNIFICANCE (`q_vs_always_up`, `q_vs_persistence`;
    each ticker's own p in `skill_p_value`, `persistence_p_value`): read 103 at a time, p <= 0.05 labels
    several coin-flip models every evening (board_stats).
    """
    view = view_name(False, include_in_sample, include_ungated)
    flags = {"include_in_sample": include_in_sample, "include_ungated": include_ungated}
    df, bounds = _read(engine, view, COLUMNS, mode)
    df = _with_skill(engine, df, mode, **flags)
    df = _with_target_dates(engine, df, mode, bounds=bounds, **flags)
    df = _with_stale_rows(engine, df, mode, include_ungated)
    df = board_stats.label_board(df)
    # Stale rows (accuracy NaN) go last.
    return df.sort_values(["direction_accuracy", "ticker"], ascending=[False, True]).reset_index(drop=True)


def _with_stale_rows(engine: Engine, board: pd.DataFrame, mode: str, include_ungated: bool) -> pd.DataFrame:
    """Every ticker with a serving model gets a row (SPEC §2 freshness: none disappears silently);
    without `include_ungated` only tickers with an active model (the others are named by `ungated_note`).

    The window stays the one the view computes (the 30 days ending at the latest filled evening of all
    tickers), so every scored row of the board covers the same period and the tickers compare fairly;
    a ticker with no filled rows in it (its prices stopped arriving, or it is new) is added with n = 0,
    `stale` True and `last_filled`, its latest filled evening in this mode (None when it never had one).
    """
    board = board.copy()
    board["stale"] = False
    board["last_filled"] = board["window_end"] if len(board) else pd.Series(dtype=object)
    serving = serving_models(engine)
    missing = sorted(
        t for t in set(serving) - set(board["ticker"]) if include_ungated or serving[t].status == "active"
    )
    if not missing:
        return board
    last = newest_filled_run_dates(engine, missing, mode)  # since inception, by index
    window = (board["window_start"].min(), board["window_end"].max()) if len(board) else (None, None)
    extra = pd.DataFrame(
        [
            {
                "ticker": t,
                "mode": mode,
                **dict.fromkeys(COUNTS, 0),
                **dict.fromkeys(DATE_COUNTS.values(), 0),
                "window_start": window[0],
                "window_end": window[1],
                "beats_always_up": False,
                "beats_persistence": False,
                "model_only": 0,
                "up_only": 0,
                "gated": serving[t].status == "active",
                "stale": True,
                "last_filled": last.get(t),
            }
            for t in missing
        ]
    )
    return pd.concat([board, extra], ignore_index=True)[board.columns]


def leaderboard_by_model(
    engine: Engine, mode: str = "all", include_in_sample: bool = False, include_ungated: bool = False
) -> pd.DataFrame:
    """Per-model accuracy: one row per (ticker, model_version), each version on its own rows (out of
    sample unless `include_in_sample`, gated unless `include_ungated`)."""
    cols = ["ticker", "model_version", *COLUMNS[1:]]
    view = view_name(True, include_in_sample, include_ungated)
    flags = {"include_in_sample": include_in_sample, "include_ungated": include_ungated}
    df, bounds = _read(engine, view, cols, mode)
    df = _with_skill(engine, df, mode, by_model=True, **flags)
    df = _with_target_dates(engine, df, mode, by_model=True, bounds=bounds, **flags)
    df = board_stats.label_board(df)
    return df.sort_values(["ticker", "model_version"]).reset_index(drop=True)


def _read(engine: Engine, view: str, columns: list[str], mode: str) -> tuple[pd.DataFrame, Bounds | None]:
    """The view's rows of `mode`, typed, read within the board's windows (board_reads.read_view)."""
    if mode not in MODES:
        raise InputError(f"leaderboard mode must be one of {', '.join(MODES)}, not {mode!r}")
    df, bounds = read_view(engine, view, columns, mode)
    return _typed(df), bounds


def _typed(df: pd.DataFrame) -> pd.DataFrame:
    df = df.copy()
    for c in COUNTS:
        df[c] = df[c].astype("int64")
    for c in ("window_start", "window_end"):  # SQLite views return dates as text
        df[c] = pd.to_datetime(df[c]).dt.date
    df["beats_always_up"] = df["direction_accuracy"] > df["always_up_accuracy"]
    df["beats_persistence"] = df["direction_accuracy"] > df["persistence_accuracy"]
    df["gated"] = df["ungated_n"] == 0
    return df


def _with_skill(
    engine: Engine,
    board: pd.DataFrame,
    mode: str,
    *,
    by_model: bool = False,
    include_in_sample: bool = False,
    include_ungated: bool = False,
) -> pd.DataFrame:
    """Add the exact tests of "the model beats always-up / persistence" (model_only, up_only,
    skill_p_value, persistence_p_value); the labels are set from their BH q-values (board_stats)."""
    persist: dict[tuple, SkillTest] = {}
    tests = skill_tests(
        engine,
        board,
        mode,
        by_model=by_model,
        include_in_sample=include_in_sample,
        include_ungated=include_ungated,
        persistence=persist,
    )
    keys = _keys(board, by_model)
    board["model_only"] = [tests[k].model_only for k in keys]
    board["up_only"] = [tests[k].up_only for k in keys]
    board["skill_p_value"] = [tests[k].p_value for k in keys]
    board["persistence_p_value"] = [persist.get(k, SkillTest(0, 0)).p_value for k in keys]
    return board


def _keys(frame: pd.DataFrame, by_model: bool) -> list[tuple]:
    cols = ["ticker", "model_version"] if by_model else ["ticker"]
    return list(frame[cols].itertuples(index=False, name=None))


def skill_tests(
    engine: Engine,
    board: pd.DataFrame,
    mode: str,
    *,
    by_model: bool = False,
    include_in_sample: bool = False,
    include_ungated: bool = False,
    persistence: dict | None = None,
) -> dict[tuple, SkillTest]:
    """The exact test per board row, on exactly the rows its view scored.

    The same selection as the views (`_select`), then the row's own window (window_start..window_end).
    Computed in Python from the stored direction flags: a view cannot run an exact binomial tail on both
    databases.
    """
    tests = {k: SkillTest(0, 0) for k in _keys(board, by_model)}
    if board.empty:
        return tests
    rows = next_day_rows(
        engine, sorted({k[0] for k in tests}), board["window_start"].min(), board["window_end"].max()
    )
    rows = scored_rows(
        rows, mode, by_model=by_model, include_in_sample=include_in_sample, include_ungated=include_ungated
    )
    if rows.empty:
        return tests
    cols = ["ticker", "model_version"] if by_model else ["ticker"]
    spans = {
        k: (a, b)
        for k, a, b in zip(_keys(board, by_model), board["window_start"], board["window_end"], strict=True)
    }
    for key, group in rows.groupby(cols):
        key = key if isinstance(key, tuple) else (key,)
        if key not in spans:
            continue
        start, end = spans[key]
        inside = group[(group["run_date"] >= start) & (group["run_date"] <= end)]
        model_right = inside["model_right"].to_numpy(bool)
        up = inside["up"].to_numpy(bool)
        tests[key] = SkillTest(int((model_right & ~up).sum()), int((~model_right & up).sum()))
        if persistence is not None:
            # Persistence's own rows (those with a previous close), as the view scores it.
            has = inside["has_prev"].to_numpy(bool)
            right = inside["persist_right"].to_numpy(bool)
            persistence[key] = SkillTest(
                int((model_right & ~right & has).sum()), int((~model_right & right & has).sum())
            )
    return tests


def universe(
    engine: Engine,
    board: pd.DataFrame,
    mode: str = "all",
    include_in_sample: bool = False,
    include_ungated: bool = False,
) -> UniverseTest:
    """The board's one universe-level answer (board_stats.universe_test, Hansen's SPA): does any model
    beat its baseline after the search over the tickers? On the ticker board's scored rows; each
    ticker's baseline is chosen on its filled evenings in the HISTORY_DAYS before the window."""
    scored = board[(board["n"] > 0) & ~board.get("stale", pd.Series(False, index=board.index)).astype(bool)]
    keys = sorted(scored["ticker"].unique()) if len(scored) else []
    if not keys:
        return board_stats.spa_test(pd.DataFrame())
    start, end = scored["window_start"].min(), scored["window_end"].max()
    raw = next_day_rows(engine, keys, start - dt.timedelta(days=board_stats.HISTORY_DAYS), end)
    flags = {"by_model": False, "include_in_sample": include_in_sample, "include_ungated": include_ungated}
    inside = scored_rows(raw[raw["run_date"] >= start], mode, **flags).rename(columns={"ticker": "key"})
    # Baselines depend only on prices: every filled evening before the window counts, whoever predicted it.
    before = raw[(raw["run_date"] < start) & raw["filled"]].drop_duplicates(["ticker", "run_date"])
    return board_stats.universe_test(inside, before.rename(columns={"ticker": "key"}), keys)


def _with_target_dates(
    engine: Engine,
    board: pd.DataFrame,
    mode: str,
    *,
    by_model: bool = False,
    include_in_sample: bool = False,
    include_ungated: bool = False,
    bounds: Bounds | None = None,
) -> pd.DataFrame:
    """`next_monday_dates` / `one_month_dates`: the distinct target dates under each horizon's rows
    (`next_monday_n`, `one_month_n`). The same rows as the view (first row per evening on the ticker board,
    the same in-sample / ungated / shadow rules, the 30 days ending at the horizon's newest filled target
    over the whole board): a week's five evenings share one next-Monday target, so ~20 rows stand on 4-5
    dates and are not 20 independent outcomes."""
    board = board.copy()
    for col in DATE_COUNTS.values():
        board[col] = 0
    if board.empty:
        return board
    s = snapshots.c
    where = [s.model_status != SHADOW]
    if bounds is not None:
        # The view's own rows were all at or after `since` (_read): so are these, the same rows.
        where.append(s.run_date >= bounds.since)
    if not by_model:
        first = select(func.min(s.id)).where(s.model_status != SHADOW).group_by(s.ticker, s.run_date)
        if bounds is not None:
            # The same first row (it shares its run_date). A closed range: SQLite's planner (no
            # statistics) reads the run_date index for it, but scans a whole index for an open one.
            first = (
                select(func.min(s.id))
                .where(s.model_status != SHADOW, s.run_date.between(bounds.since, dt.date.max))
                .group_by(s.run_date, s.ticker)
            )
        where.append(s.id.in_(first))
    if not include_in_sample:
        where.append(not_(s.in_sample))
    if not include_ungated:
        where.append(s.model_status == "active")
    cols = [s.ticker, s.model_version] if by_model else [s.ticker]
    keys = ["ticker", "model_version"] if by_model else ["ticker"]
    with engine.connect() as conn:
        for horizon, out in DATE_COUNTS.items():
            date, err = s[f"{horizon}_date"], s[f"{horizon}_pct_error"]
            if bounds is None:
                latest = as_date(
                    conn.execute(select(func.max(date)).where(*where, err.is_not(None))).scalar_one()
                )
            else:
                latest = bounds.latest[horizon]  # the view's, on the same rows
            if latest is None:
                continue
            stmt = select(*cols, s.mode, date.label("target")).where(
                *where, err.is_not(None), date <= latest, date >= latest - dt.timedelta(days=29)
            )
            if mode != "all":
                stmt = stmt.where(s.mode == mode)
            rows = pd.DataFrame(conn.execute(stmt).all(), columns=[*keys, "mode", "target"])
            if rows.empty:
                continue
            counts = rows.groupby(keys)["target"].nunique()
            board[out] = [
                int(counts.get(k if by_model else k[0], 0))
                for k in board[keys].itertuples(index=False, name=None)
            ]
    return board


def hidden_in_sample(engine: Engine, mode: str = "all") -> int:
    """How many in-sample evenings the default board leaves out: the filled first rows of an evening
    flagged in-sample inside the window `--include-in-sample` would score."""
    if mode not in MODES:
        raise InputError(f"leaderboard mode must be one of {', '.join(MODES)}, not {mode!r}")
    views, _ = _read(engine, TICKER_VIEW_WITH_IN_SAMPLE, COLUMNS, mode)
    if views.empty:
        return 0
    start, end = views["window_start"].min(), views["window_end"].max()
    with engine.connect() as conn:
        s = snapshots.c
        # Within the window only: an evening's first row shares its run_date (issue 31: flat in years).
        first = (
            select(func.min(s.id))
            .where(s.model_status != SHADOW, s.run_date >= start, s.run_date <= end)
            .group_by(s.run_date, s.ticker)
        )
        stmt = select(func.count()).where(
            s.id.in_(first),
            s.in_sample.is_(True),
            s.next_day_actual.is_not(None),
            s.run_date >= start,
            s.run_date <= end,
        )
        if mode != "all":
            stmt = stmt.where(s.mode == mode)
        return int(conn.execute(stmt).scalar_one())


def in_sample_note(engine: Engine, mode: str = "all") -> str | None:
    """The line under a default board that says what it hides and how to show it (None: nothing hidden)."""
    hidden = hidden_in_sample(engine, mode)
    if not hidden:
        return None
    return (
        f"{hidden} in-sample rows hidden; --include-in-sample shows them (replayed evenings whose next-day "
        "target the model's training data already reached)"
    )


def hidden_ungated(engine: Engine) -> list[str]:
    """The tickers whose serving model is a candidate (no active model): the default board leaves their
    evenings out."""
    return sorted(t for t, rec in serving_models(engine).items() if rec.status != "active")


def ungated_note(engine: Engine, include_ungated: bool = False) -> str | None:
    """The line under a board about ungated rows: what the default hides, or the legend when shown."""
    if include_ungated:
        return None
    hidden = hidden_ungated(engine)
    if not hidden:
        return None
    return (
        f"{len(hidden)} ungated ticker{'s' if len(hidden) > 1 else ''} hidden ({', '.join(hidden)}): no active "
        "model, its rows come from a candidate that never passed the gate; --include-ungated shows them"
    )


def verdict(df: pd.DataFrame) -> str:
    """One plain sentence about the always-up baseline (and the stale tickers, named)."""
    stale = df[df["stale"]] if "stale" in df else df.iloc[0:0]
    if len(stale):
        named = ", ".join(
            f"{r.ticker} (last filled {r.last_filled or 'never'})" for r in stale.itertuples(index=False)
        )
        return _verdict(df[~df["stale"]]) + f" Stale, no filled rows in the window: {named}."
    return _verdict(df)


def _verdict(df: pd.DataFrame) -> str:
    if df.empty:
        return "No filled snapshots in the window yet: nothing to score."
    # "Beats" only with the board-wide test (beats_always_up needs BH q <= SIGNIFICANCE over every
    # (ticker, baseline) test of the board); a higher accuracy on 30 days is often luck, and in a falling
    # market always-up is below a coin: each such model is named with its p and q, one below 50 % says so.
    beat = int(df["beats_always_up"].sum())
    ahead = df[(df["direction_accuracy"] > df["always_up_accuracy"]) & ~df["beats_always_up"]]
    tests = len(board_stats.BASELINES) * len(df)  # the BH family: board_stats.label_board's
    rule = (
        f"BH q <= {SIGNIFICANCE:g} over the {tests} (ticker, baseline) one-sided exact tests of this board, "
        f"controlling the false-label rate at {SIGNIFICANCE:.0%}"
    )
    if beat == 0 and ahead.empty:
        return f"No model beats the always-up baseline ({len(df)} tickers scored; {rule})."
    if beat == 0:
        head = f"No model beats always-up ({rule}; {len(df)} tickers scored)."
    elif beat < len(df):
        head = f"{beat} of {len(df)} models beat always-up ({rule}); {len(df) - beat} do not."
    else:
        head = f"All {len(df)} models beat always-up ({rule})."
    if ahead.empty:
        return head
    named = ", ".join(
        f"{r.ticker} {r.direction_accuracy * 100:.1f}% vs {r.always_up_accuracy * 100:.1f}%, "
        f"p = {format_p_value(r.skill_p_value)}, q = {format_p_value(_q(r))}"
        + (", below 50%" if r.direction_accuracy < 0.5 else "")
        for r in ahead.itertuples(index=False)
    )
    return f"{head} More accurate than always-up but not significantly (not evidence of skill): {named}."


def _q(row) -> float:
    return getattr(row, "q_vs_always_up", math.nan)
