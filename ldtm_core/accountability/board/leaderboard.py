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
at their own newest filled target date, with their own counts beside them.

Baselines (scoring.baselines, the registry): each board baseline's columns (`Baseline.column`) are
computed beside the view's figures from each row's recorded call (chain version 3; older rows: the rule
on the row's own recorded closes), on the rows it made a call on (`persistence_n`: rows with a previous
close). A baseline added to the registry reaches the board, its BH family, the CLI and the dashboard
with no SQL.

A dated universe (migration 0034, data.membership): with a membership history, a row counts only on an
evening its ticker was a member; the rows left out are kept and counted (`non_member_note`).

Read at scale (`board_stats`): "beats" is set by Benjamini-Hochberg q-values over every
(ticker, board baseline) test of the board (`q_vs_{baseline}` beside each ticker's own p),
`universe()` answers once per board whether any model beats its baseline after the search over the
tickers (arch's SPA test, its `upper` p), and `next_monday_dates` / `one_month_dates` say on how many distinct target dates
each horizon's rows stand (consecutive evenings share a next-Monday target).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import math

import numpy as np
import pandas as pd
from sqlalchemy import Engine, func, not_, select

from ldtm_core.accountability.board import record
from ldtm_core.accountability.board.reads import (
    TICKER_VIEW_WITH_IN_SAMPLE,
    Bounds,
    as_date,
    newest_filled_run_dates,
    next_day_rows,
    read_view,
    scored_rows,
    view_name,
)
from ldtm_core.data.membership import load_membership
from ldtm_core.errors import InputError
from ldtm_core.horizons import DIRECTION, ERROR_ONLY
from ldtm_core.learning.registry import UNPUBLISHED, serving_models
from ldtm_core.schema import snapshots
from ldtm_core.scoring import baselines, board_stats, evidence
from ldtm_core.scoring.board_stats import ALPHA, UniverseTest
from ldtm_core.scoring.skill import SkillTest, format_p_value

MODES = ("all", "live", "replay")
# The board's per-horizon columns (accuracy_views): the direction horizon's mean |pct error|, then each
# other horizon's, with the count of its own window.
HORIZON_COLUMNS = [f"{DIRECTION.name}_mape"] + [f"{h.name}_{c}" for h in ERROR_ONLY for c in ("mape", "n")]
SIGNIFICANCE = ALPHA  # the q-value (BH over the board, board_stats) the verdict calls evidence
# What the accuracy views give (SQL: windows, hits, errors); the baselines' columns are computed beside
# them from the rows' recorded calls (`_with_baselines`).
COLUMNS = [
    "ticker",
    "mode",
    "n",
    "hits",
    "direction_accuracy",
    "wilson_low",
    "wilson_high",
    *HORIZON_COLUMNS,
    "ungated_n",
    "window_start",
    "window_end",
]


def baseline_columns(what: str) -> list[str]:
    """Column `what` (Baseline.column) of every board baseline, in registry order."""
    return [b.column(what) for b in baselines.board_baselines()]


def display_columns() -> list[str]:
    """What a reader sees of one board row, in order: the one list the dashboard shows and the CLI follows
    (cli.accountability.board_cells: a cell per display column or joined group, "gated" beside the
    ticker, the window in its title). Each board baseline adds its accuracy and n beside the model's,
    then its exact test: model-only / baseline-only counts, p, BH q and the label."""
    tests = [
        b.column(w)
        for b in baselines.board_baselines()
        for w in ("model_only", "base_only", "p", "q", "beats")
    ]
    return [
        "ticker",
        "gated",
        "n",
        "direction_accuracy",
        "wilson_low",
        "wilson_high",
        *(b.column(w) for b in baselines.board_baselines() for w in ("accuracy", "n")),
        *tests,
        *record.display_columns(),
        f"{DIRECTION.name}_mape",
        *(f"{h.name}_{c}" for h in ERROR_ONLY for c in ("mape", "n", "dates")),
        *(naive_column(h.name) for h in (DIRECTION, *ERROR_ONLY)),
        "window_start",
        "window_end",
    ]


def counts() -> tuple[str, ...]:
    """The board's integer columns: 0 on a stale row."""
    return (
        "n",
        "hits",
        *(f"{h.name}_n" for h in ERROR_ONLY),
        "ungated_n",
        *(c for w in ("n", "model_only", "base_only") for c in baseline_columns(w)),
    )


def __getattr__(name: str):
    """`DISPLAY_COLUMNS` / `COUNTS`: derived from the baseline registry when read."""
    if name == "DISPLAY_COLUMNS":
        return display_columns()
    if name == "COUNTS":
        return counts()
    raise AttributeError(name)


def wilson_interval(hits: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """95% Wilson score interval for a proportion (the same formula the view uses)."""
    if n == 0:
        return (math.nan, math.nan)
    p = hits / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return centre - half, centre + half


# Distinct target dates under each horizon's rows (computed in Python from the same rows as the view).
DATE_COUNTS = {h.name: f"{h.name}_dates" for h in ERROR_ONLY}
UNGATED_LEGEND = (
    "ungated: predicted by a candidate that never passed the gate (the ticker has no active model)"
)


def leaderboard(
    engine: Engine,
    mode: str = "all",
    include_in_sample: bool = False,
    include_ungated: bool = False,
    with_record: bool = True,
) -> pd.DataFrame:
    """One row per ticker for `mode` (all / live / replay), best direction accuracy first.

    Each (ticker, evening) counts once: its first recorded prediction. `include_in_sample` adds the
    in-sample replays back, `include_ungated` the evenings predicted by a candidate (`gated` False).
    Each board baseline's `beats_{name}` is True only when the model is strictly more accurate than the
    baseline on the same rows AND the Benjamini-Hochberg q-value of its one-sided exact sign test, over
    every (ticker, board baseline) test of this board, is <= SIGNIFICANCE (`q_vs_{name}`; each ticker's
    own p beside it, always-up's in `skill_p_value`): read 103 at a time, p <= 0.05 labels several
    coin-flip models every evening (board_stats).
    """
    view = view_name(False, include_in_sample, include_ungated)
    flags = {"include_in_sample": include_in_sample, "include_ungated": include_ungated}
    df, bounds = _read(engine, view, COLUMNS, mode)
    df = _with_baselines(engine, df, mode, **flags)
    df = _with_target_dates(engine, df, mode, bounds=bounds, **flags)
    df = _with_stale_rows(engine, df, mode, include_ungated)
    df = board_stats.label_board(df)  # the window's q-values (a description)
    if with_record:
        df = record.with_evidence(engine, df, mode, **flags)  # the labels: the whole record's evidence
    df["in_sample_included"] = include_in_sample  # the sentences say so (verdict, universe)
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
                **dict.fromkeys(counts(), 0),
                **dict.fromkeys(DATE_COUNTS.values(), 0),
                **dict.fromkeys(baseline_columns("p"), 1.0),
                "window_start": window[0],
                "window_end": window[1],
                "gated": serving[t].status == "active",
                "stale": True,
                "last_filled": last.get(t),
            }
            for t in missing
        ]
    )
    return pd.concat([board, extra], ignore_index=True)[board.columns]


def leaderboard_by_model(
    engine: Engine,
    mode: str = "all",
    include_in_sample: bool = False,
    include_ungated: bool = False,
    with_record: bool = True,
) -> pd.DataFrame:
    """Per-model accuracy: one row per (ticker, model_version), each version on its own rows (out of
    sample unless `include_in_sample`, gated unless `include_ungated`)."""
    cols = ["ticker", "model_version", *COLUMNS[1:]]
    view = view_name(True, include_in_sample, include_ungated)
    flags = {"include_in_sample": include_in_sample, "include_ungated": include_ungated}
    df, bounds = _read(engine, view, cols, mode)
    df = _with_baselines(engine, df, mode, by_model=True, **flags)
    df = _with_target_dates(engine, df, mode, by_model=True, bounds=bounds, **flags)
    df = board_stats.label_board(df)
    if with_record:
        df = record.with_evidence(engine, df, mode, by_model=True, **flags)
    df["in_sample_included"] = include_in_sample
    return df.sort_values(["ticker", "model_version"]).reset_index(drop=True)


def _read(engine: Engine, view: str, columns: list[str], mode: str) -> tuple[pd.DataFrame, Bounds | None]:
    """The view's rows of `mode`, typed, read within the board's windows (board_reads.read_view)."""
    if mode not in MODES:
        raise InputError(f"leaderboard mode must be one of {', '.join(MODES)}, not {mode!r}")
    df, bounds = read_view(engine, view, columns, mode)
    return _typed(df), bounds


def _typed(df: pd.DataFrame) -> pd.DataFrame:
    df = df.copy()
    for c in ("n", "hits", *(f"{h.name}_n" for h in ERROR_ONLY), "ungated_n"):
        df[c] = df[c].astype("int64")
    for c in ("window_start", "window_end"):  # SQLite views return dates as text
        df[c] = pd.to_datetime(df[c]).dt.date
    df["gated"] = df["ungated_n"] == 0
    return df


def _with_baselines(
    engine: Engine,
    board: pd.DataFrame,
    mode: str,
    *,
    by_model: bool = False,
    include_in_sample: bool = False,
    include_ungated: bool = False,
) -> pd.DataFrame:
    """Each board baseline's columns (Baseline.column: accuracy, n, model-only / baseline-only counts,
    the exact one-sided p) per board row, on exactly the rows its view scored: the views' selection
    (`scored_rows`), then the row's own window (window_start..window_end). Computed in Python from the
    rows' recorded calls (reads.next_day_rows): a view cannot run an exact binomial tail on both
    databases, and a baseline added to the registry needs no new view. The labels are set from the BH
    q-values afterwards (board_stats.label_board)."""
    board = board.copy()
    keys = _keys(board, by_model)
    cols = ["ticker", "model_version"] if by_model else ["ticker"]
    figures = pd.DataFrame()
    if not board.empty:
        rows = next_day_rows(
            engine, sorted({k[0] for k in keys}), board["window_start"].min(), board["window_end"].max()
        )
        rows = scored_rows(
            rows,
            mode,
            by_model=by_model,
            include_in_sample=include_in_sample,
            include_ungated=include_ungated,
        )
        if not rows.empty:
            span = board[[*cols, "window_start", "window_end"]]
            rows = rows.merge(span, on=cols)
            rows = rows[(rows["run_date"] >= rows["window_start"]) & (rows["run_date"] <= rows["window_end"])]
        if not rows.empty:
            figures = board_stats.baseline_figures(rows, cols).set_index(cols)
    index = pd.MultiIndex.from_tuples(keys, names=cols) if by_model else pd.Index([k[0] for k in keys])
    for b in baselines.board_baselines():
        for what, empty in (("accuracy", float("nan")), ("n", 0), ("model_only", 0), ("base_only", 0)):
            col = b.column(what)
            got = figures[col].reindex(index) if col in figures else pd.Series(empty, index=index)
            board[col] = got.fillna(empty).to_numpy() if what != "accuracy" else got.to_numpy(float)
            if what != "accuracy":
                board[col] = board[col].astype("int64")
        col = b.column("p")
        got = figures[col].reindex(index) if col in figures else pd.Series(float("nan"), index=index)
        # No call on the window's rows (no row, or a baseline recorded only from chain version 3): no test.
        called = board[b.column("n")].to_numpy() > 0
        board[col] = np.where(called, got.fillna(SkillTest(0, 0).p_value).to_numpy(float), np.nan)
    return board


def _keys(frame: pd.DataFrame, by_model: bool) -> list[tuple]:
    cols = ["ticker", "model_version"] if by_model else ["ticker"]
    return list(frame[cols].itertuples(index=False, name=None))


def universe(
    engine: Engine,
    board: pd.DataFrame,
    mode: str = "all",
    include_in_sample: bool = False,
    include_ungated: bool = False,
) -> UniverseTest:
    """The board's one universe-level answer (board_stats.universe_test, arch's SPA test): does any model
    beat its baseline after the search over the tickers? On the ticker board's scored rows; each
    ticker's baseline is chosen on its filled evenings in the HISTORY_DAYS before the window."""
    scored = board[(board["n"] > 0) & ~board.get("stale", pd.Series(False, index=board.index)).astype(bool)]
    keys = sorted(scored["ticker"].unique()) if len(scored) else []
    if not keys:
        answer = board_stats.spa_test(pd.DataFrame())
        return dataclasses.replace(answer, caveat=IN_SAMPLE_CAVEAT) if include_in_sample else answer
    start, end = scored["window_start"].min(), scored["window_end"].max()
    raw = next_day_rows(engine, keys, start - dt.timedelta(days=board_stats.HISTORY_DAYS), end)
    flags = {"by_model": False, "include_in_sample": include_in_sample, "include_ungated": include_ungated}
    inside = scored_rows(raw[raw["run_date"] >= start], mode, **flags).rename(columns={"ticker": "key"})
    # Baselines depend only on prices: every filled evening before the window counts, whoever predicted it.
    before = raw[(raw["run_date"] < start) & raw["filled"]].drop_duplicates(["ticker", "run_date"])
    answer = board_stats.universe_test(inside, before.rename(columns={"ticker": "key"}), keys)
    return dataclasses.replace(answer, caveat=IN_SAMPLE_CAVEAT) if include_in_sample else answer


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
    dates and are not 20 independent outcomes. Beside each horizon's mean |error|, the no-change
    forecast's on the same rows (`{horizon}_naive_mape`): a next-day |error| of 1.6 % is what predicting
    no move already gets."""
    board = board.copy()
    for col in DATE_COUNTS.values():
        board[col] = 0
    for h in (DIRECTION, *ERROR_ONLY):
        board[naive_column(h.name)] = math.nan
    if board.empty:
        return board
    s = snapshots.c
    where = [s.model_status.not_in(UNPUBLISHED)]
    if bounds is not None:
        # The view's own rows were all at or after `since` (_read): so are these, the same rows.
        where.append(s.run_date >= bounds.since)
    if not by_model:
        first = (
            select(func.min(s.id)).where(s.model_status.not_in(UNPUBLISHED)).group_by(s.ticker, s.run_date)
        )
        if bounds is not None:
            # The same first row (it shares its run_date). A closed range: SQLite's planner (no
            # statistics) reads the run_date index for it, but scans a whole index for an open one.
            first = (
                select(func.min(s.id))
                .where(s.model_status.not_in(UNPUBLISHED), s.run_date.between(bounds.since, dt.date.max))
                .group_by(s.run_date, s.ticker)
            )
        where.append(s.id.in_(first))
    if not include_in_sample:
        where.append(not_(s.in_sample))
    if not include_ungated:
        where.append(s.model_status == "active")
    cols = [s.ticker, s.model_version] if by_model else [s.ticker]
    keys = ["ticker", "model_version"] if by_model else ["ticker"]
    membership = load_membership(engine)  # the view's rows are its members' evenings (0034)
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
            actual = s[f"{horizon}_actual"]
            stmt = select(*cols, s.mode, s.run_date, date.label("target"), actual, s.run_date_close).where(
                *where, err.is_not(None), date <= latest, date >= latest - dt.timedelta(days=29)
            )
            if mode != "all":
                stmt = stmt.where(s.mode == mode)
            names = [*keys, "mode", "run_date", "target", "actual", "close"]
            rows = pd.DataFrame(conn.execute(stmt).all(), columns=names)
            rows = rows[membership.row_mask(rows["ticker"], pd.to_datetime(rows["run_date"]))]
            if rows.empty:
                continue
            counts = rows.groupby(keys)["target"].nunique()
            board[out] = [
                int(counts.get(k if by_model else k[0], 0))
                for k in board[keys].itertuples(index=False, name=None)
            ]
            board[naive_column(horizon)] = _naive_mape(board, rows, keys, by_model)
        # The next-day window is the view's per row (window_start..window_end), on the run date.
        stmt = select(*cols, s.mode, s.run_date, s.next_day_actual, s.run_date_close).where(
            *where,
            s.next_day_actual.is_not(None),
            s.run_date.between(board["window_start"].min(), board["window_end"].max()),
        )
        if mode != "all":
            stmt = stmt.where(s.mode == mode)
        rows = pd.DataFrame(conn.execute(stmt).all(), columns=[*keys, "mode", "run_date", "actual", "close"])
        rows = rows[membership.row_mask(rows["ticker"], pd.to_datetime(rows["run_date"]))]
        if not rows.empty:
            rows["run_date"] = pd.to_datetime(rows["run_date"]).dt.date
            span = board[[*keys, "window_start", "window_end"]]
            rows = rows.merge(span, on=keys)
            rows = rows[(rows["run_date"] >= rows["window_start"]) & (rows["run_date"] <= rows["window_end"])]
            board[naive_column(DIRECTION.name)] = _naive_mape(board, rows, keys, by_model)
    return board


def naive_column(horizon: str) -> str:
    """The no-change forecast's mean |pct error| of `horizon` on the board row's own rows."""
    return f"{horizon}_naive_mape"


def _naive_mape(board: pd.DataFrame, rows: pd.DataFrame, keys: list[str], by_model: bool) -> list[float]:
    """Per board row: the mean |pct error| a no-change forecast (the run-date close) made on these rows,
    the comparator of the model's mean |error| (a ratio below 1 beats it, MASE-style)."""
    actual = rows["actual"].astype(float)
    err = ((rows["close"].astype(float) - actual) / actual).abs() * 100
    means = err.groupby([rows[k] for k in keys]).mean()
    return [
        float(means.get(k if by_model else k[0], math.nan))
        for k in board[keys].itertuples(index=False, name=None)
    ]


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
        # Within the window only: an evening's first row shares its run_date (flat in years).
        first = (
            select(func.min(s.id))
            .where(s.model_status.not_in(UNPUBLISHED), s.run_date >= start, s.run_date <= end)
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


def hidden_non_members(engine: Engine, mode: str = "all") -> dict[str, int]:
    """{ticker: filled evenings the board leaves out because the ticker was not a member of the universe
    on them} (data.membership; empty with no stored history): each evening's first published row, within
    the window the board scores (the whole record when no member has a scored row)."""
    membership = load_membership(engine)
    if not membership.has_history:
        return {}
    views, _ = _read(engine, "accuracy_30d_with_in_sample_and_ungated", COLUMNS, mode)
    s = snapshots.c
    where = [s.model_status.not_in(UNPUBLISHED), s.next_day_actual.is_not(None)]
    if not views.empty:
        where.append(s.run_date.between(views["window_start"].min(), views["window_end"].max()))
    if mode != "all":
        where.append(s.mode == mode)
    stmt = select(s.ticker, s.run_date).where(*where).group_by(s.ticker, s.run_date)
    with engine.connect() as conn:
        rows = pd.DataFrame(conn.execute(stmt).all(), columns=["ticker", "run_date"])
    rows = rows[~membership.row_mask(rows["ticker"], pd.to_datetime(rows["run_date"]))]
    return {str(t): int(n) for t, n in rows.groupby("ticker").size().items()}


def non_member_note(engine: Engine, mode: str = "all") -> str | None:
    """The line under a board naming the rows it leaves out as outside the universe (None: none)."""
    hidden = hidden_non_members(engine, mode)
    if not hidden:
        return None
    named = ", ".join(f"{t} ({n})" for t, n in sorted(hidden.items()))
    return (
        f"{sum(hidden.values())} filled evenings not scored: their ticker was not a member of the universe "
        f"that evening ({named}); the rows are kept, `ldtm universe show` lists the membership history"
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


# Said in the sentences of a board that scores in-sample rows (`--include-in-sample`).
IN_SAMPLE_CAVEAT = (
    " (in-sample rows included: replayed evenings the models' training data already reached, so these "
    "figures are not evidence of skill)"
)


def verdict(df: pd.DataFrame) -> str:
    """One plain sentence about the always-up baseline (and the stale tickers, named; and in-sample rows
    when the board includes them)."""
    caveat = IN_SAMPLE_CAVEAT if "in_sample_included" in df and df["in_sample_included"].any() else ""
    stale = df[df["stale"]] if "stale" in df else df.iloc[0:0]
    if len(stale):
        named = ", ".join(
            f"{r.ticker} (last filled {r.last_filled or 'never'})" for r in stale.itertuples(index=False)
        )
        return _verdict(df[~df["stale"]]) + f" Stale, no filled rows in the window: {named}." + caveat
    return _verdict(df) + caveat


def _verdict(df: pd.DataFrame) -> str:
    if df.empty:
        return "No filled snapshots in the window yet: nothing to score."
    return _record_sentence(df) + _window_sentence(df)


def _record_sentence(df: pd.DataFrame) -> str:
    """The label: shown to beat every baseline (a coin included) on the whole published record, e-BH over
    the tickers (accountability.board.record); a negative says what the board could have shown."""
    if "shown_skill" not in df:
        return ""
    rows = int((df["record_n"] > 0).sum())
    rule = (
        f"anytime-valid e-values over each ticker's whole published record, e-BH at {SIGNIFICANCE:g} over "
        f"the {rows} tickers with a record: at most {SIGNIFICANCE:.0%} of the labels are expected false on "
        "any evening it is read"
    )
    shown = df[df["shown_skill"].astype(bool)]
    if shown.empty:
        head = (
            f"No model is shown to beat every baseline, a coin included ({rule}); "
            f"{evidence.detectable(max(rows, 1))}."
        )
    else:
        named = ", ".join(
            f"{r.ticker} {r.record_accuracy * 100:.1f}% over {r.record_n} evenings (e = {r.e_skill:.3g})"
            for r in shown.sort_values("e_skill", ascending=False).head(10).itertuples(index=False)
        )
        more = f" and {len(shown) - 10} more" if len(shown) > 10 else ""
        head = f"{len(shown)} of {rows} models are shown to beat every baseline, a coin included ({rule}): {named}{more}."
    up = int(df["beats_always_up"].sum())
    if up > len(shown):
        head += f" {up} are shown to beat always-up (not all of them a coin)."
    return head


def _window_sentence(df: pd.DataFrame) -> str:
    """The 30-day window, described: a higher accuracy on 30 days is often luck, and in a falling market
    always-up is below a coin: each model ahead of always-up there is named with the window's exact p and
    its BH q over the board's window tests (a description, not the label)."""
    ahead = df[df["direction_accuracy"] > df["always_up_accuracy"]]
    tests = board_stats.window_tests(df)  # the window's BH family (board_stats.label_board)
    if ahead.empty:
        return (
            f" In the 30-day window no model was more accurate than always-up ({len(df)} tickers scored, "
            f"the window's {tests} tests)."
        )
    named = ", ".join(
        f"{r.ticker} {r.direction_accuracy * 100:.1f}% vs {r.always_up_accuracy * 100:.1f}%, "
        f"p = {format_p_value(r.skill_p_value)}, q = {format_p_value(_q(r))}"
        + (", below 50%" if r.direction_accuracy < 0.5 else "")
        for r in ahead.head(20).itertuples(index=False)
    )
    more = f" and {len(ahead) - 20} more" if len(ahead) > 20 else ""
    return (
        f" In the 30-day window {len(ahead)} of {len(df)} were more accurate than always-up (a description, "
        f"not evidence of skill; p is each ticker's exact test, q BH over the window's {tests} tests): "
        f"{named}{more}."
    )


def _q(row) -> float:
    return getattr(row, "q_vs_always_up", math.nan)
