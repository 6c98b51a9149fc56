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
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from sqlalchemy import Engine, func, select, text

from ldtm_core.accountability.registry import SHADOW, serving_models
from ldtm_core.accountability.skill import SkillTest, discordant_counts, format_p_value
from ldtm_core.errors import InputError
from ldtm_core.horizons import DIRECTION, ERROR_ONLY
from ldtm_core.schema import snapshots

MODES = ("all", "live", "replay")
# The board's per-horizon columns (accuracy_views): the direction horizon's mean |pct error|, then each
# other horizon's, with the count of its own window.
HORIZON_COLUMNS = [f"{DIRECTION.name}_mape"] + [f"{h.name}_{c}" for h in ERROR_ONLY for c in ("mape", "n")]
SIGNIFICANCE = 0.05  # the p-value the verdict calls evidence of beating always-up
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
    the baseline on the same rows AND the one-sided exact sign test on their disagreements gives
    p <= SIGNIFICANCE (`skill_p_value`, `persistence_p_value` beside them): in a falling market always-up
    is far below a coin, and a model below a coin "beating" it is noise.
    """
    view = view_name(False, include_in_sample, include_ungated)
    df = _with_skill(
        engine,
        _read(engine, view, COLUMNS, mode),
        mode,
        include_in_sample=include_in_sample,
        include_ungated=include_ungated,
    )
    df = _with_stale_rows(engine, df, mode, include_ungated)
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
    s = snapshots.c
    stmt = (
        select(s.ticker, func.max(s.run_date))
        .where(s.ticker.in_(missing), s.next_day_actual.is_not(None))
        .group_by(s.ticker)
    )
    if mode != "all":
        stmt = stmt.where(s.mode == mode)
    with engine.connect() as conn:
        last = {t: pd.Timestamp(d).date() for t, d in conn.execute(stmt).all()}
    window = (board["window_start"].min(), board["window_end"].max()) if len(board) else (None, None)
    extra = pd.DataFrame(
        [
            {
                "ticker": t,
                "mode": mode,
                **dict.fromkeys(COUNTS, 0),
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
    df = _with_skill(
        engine,
        _read(engine, view, cols, mode),
        mode,
        by_model=True,
        include_in_sample=include_in_sample,
        include_ungated=include_ungated,
    )
    return df.sort_values(["ticker", "model_version"]).reset_index(drop=True)


def _read(engine: Engine, view: str, columns: list[str], mode: str) -> pd.DataFrame:
    if mode not in MODES:
        raise InputError(f"leaderboard mode must be one of {', '.join(MODES)}, not {mode!r}")
    cols = ", ".join(columns)
    # Fixed view and column names from this module and a bound parameter: no user text reaches the SQL.
    stmt = text(f"SELECT {cols} FROM {view} WHERE mode = :mode")  # noqa: S608
    with engine.connect() as conn:
        df = pd.DataFrame(conn.execute(stmt, {"mode": mode}).all(), columns=columns)
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
    skill_p_value, persistence_p_value); "beats" needs the test, not only a higher accuracy."""
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
    board["beats_always_up"] = board["beats_always_up"] & (board["skill_p_value"] <= SIGNIFICANCE)
    board["beats_persistence"] = board["beats_persistence"] & (board["persistence_p_value"] <= SIGNIFICANCE)
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

    The same selection as the views (migration 0017): the ticker board takes the first recorded row of
    each (ticker, evening), the per-model board every row of each version; in-sample and ungated rows
    dropped unless asked for. Then the row's own window (window_start..window_end). Computed
    in Python from the stored direction flags: a view cannot run an exact binomial tail on both databases.
    """
    tests = {k: SkillTest(0, 0) for k in _keys(board, by_model)}
    if board.empty:
        return tests
    s = snapshots.c
    stmt = (
        select(
            s.id,
            s.ticker,
            s.model_version,
            s.run_date,
            s.mode,
            s.in_sample,
            s.model_status,
            s.next_day_direction_correct,
            s.next_day_actual,
            s.run_date_close,
            s.prev_close,
        )
        .where(
            s.ticker.in_(sorted({k[0] for k in tests})),
            s.model_status != SHADOW,
            s.run_date >= board["window_start"].min(),
            s.run_date <= board["window_end"].max(),
        )
        .order_by(s.id)
    )
    with engine.connect() as conn:
        rows = pd.DataFrame(conn.execute(stmt).mappings().all())
    if rows.empty:
        return tests
    if not by_model:
        rows = rows.drop_duplicates(["ticker", "run_date"], keep="first")
    if not include_in_sample:
        rows = rows[~rows["in_sample"].astype(bool)]
    if not include_ungated:
        rows = rows[rows["model_status"] == "active"]
    rows = rows[rows["next_day_actual"].notna()]
    if mode != "all":
        rows = rows[rows["mode"] == mode]
    rows["run_date"] = pd.to_datetime(rows["run_date"]).dt.date
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
        model_right = inside["next_day_direction_correct"].astype(bool).to_numpy()
        tests[key] = discordant_counts(
            model_right, (inside["next_day_actual"] > inside["run_date_close"]).to_numpy()
        )
        if persistence is not None:
            # Persistence's own rows (a previous close, and not a tie), as the view scores it.
            close = inside["run_date_close"].to_numpy(float)
            has = inside["prev_close"].notna().to_numpy() & (
                inside["next_day_actual"].to_numpy(float) != close
            )
            said = np.sign(close - inside["prev_close"].to_numpy(float))
            right = said == np.sign(inside["next_day_actual"].to_numpy(float) - close)
            persistence[key] = SkillTest(
                int((model_right & ~right & has).sum()), int((~model_right & right & has).sum())
            )
    return tests


def hidden_in_sample(engine: Engine, mode: str = "all") -> int:
    """How many in-sample evenings the default board leaves out: the filled first rows of an evening
    flagged in-sample inside the window `--include-in-sample` would score."""
    if mode not in MODES:
        raise InputError(f"leaderboard mode must be one of {', '.join(MODES)}, not {mode!r}")
    # Fixed view name and a bound parameter: no user text reaches the SQL.
    window = text(
        f"SELECT MIN(window_start), MAX(window_end) FROM {TICKER_VIEW_WITH_IN_SAMPLE} WHERE mode = :mode"  # noqa: S608
    )
    with engine.connect() as conn:
        start, end = conn.execute(window, {"mode": mode}).one()
        if start is None:
            return 0
        s = snapshots.c
        first = select(func.min(s.id)).where(s.model_status != SHADOW).group_by(s.ticker, s.run_date)
        stmt = select(func.count()).where(
            s.id.in_(first),
            s.in_sample.is_(True),
            s.next_day_actual.is_not(None),
            s.run_date >= pd.Timestamp(start).date(),
            s.run_date <= pd.Timestamp(end).date(),
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
    # "Beats" only with the exact test (beats_always_up needs p <= SIGNIFICANCE); a higher accuracy on
    # 30 days is often luck, and in a falling market always-up is below a coin: each such model is
    # named with its p-value, and one below 50 % says so.
    beat = int(df["beats_always_up"].sum())
    ahead = df[(df["direction_accuracy"] > df["always_up_accuracy"]) & ~df["beats_always_up"]]
    rule = f"p <= {SIGNIFICANCE:g} in the one-sided exact test"
    if beat == 0 and ahead.empty:
        return f"No model beats the always-up baseline ({len(df)} tickers scored)."
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
        f"p = {format_p_value(r.skill_p_value)}" + (", below 50%" if r.direction_accuracy < 0.5 else "")
        for r in ahead.itertuples(index=False)
    )
    return f"{head} More accurate than always-up but not significantly (not evidence of skill): {named}."


def recent_next_day(engine: Engine, tickers: list[str], sessions: int = 30) -> pd.DataFrame:
    """Filled next-day predictions of these tickers, the last `sessions` run dates each (read-only)."""
    s = snapshots.c
    stmt = (
        select(
            s.ticker,
            s.run_date,
            s.next_day_date,
            s.next_day_pred,
            s.next_day_actual,
            s.in_sample,
            s.model_status,
        )
        .where(s.ticker.in_(tickers), s.next_day_actual.is_not(None), s.model_status != SHADOW)
        .order_by(s.ticker, s.run_date, s.id)
    )
    with engine.connect() as conn:
        df = pd.DataFrame(
            conn.execute(stmt).all(),
            columns=["ticker", "run_date", "target", "pred", "actual", "in_sample", "model_status"],
        )
    # One row per (ticker, evening): the first recorded, out of sample and gated, as the board scores it.
    df = df.drop_duplicates(["ticker", "run_date"], keep="first")
    df = df[~df.pop("in_sample").astype(bool) & (df.pop("model_status") == "active")]
    return df.groupby("ticker", group_keys=False).tail(sessions)
