"""The leaderboard (SPEC §9): rows of the `accuracy_30d` view plus the plain verdict against always-up."""

from __future__ import annotations

import math

import pandas as pd
from sqlalchemy import Engine, select, text

from .errors import InputError
from .schema import snapshots
from .skill import SkillTest, discordant_counts

MODES = ("all", "live", "replay")
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
    "next_day_mape",
    "next_monday_mape",
    "one_month_mape",
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


def leaderboard(engine: Engine, mode: str = "all") -> pd.DataFrame:
    """One row per ticker for `mode` (all / live / replay), best direction accuracy first.

    `beats_always_up` / `beats_persistence` are True only when the model is strictly more accurate
    than the baseline on the same rows.
    """
    if mode not in MODES:
        raise InputError(f"leaderboard mode must be one of {', '.join(MODES)}, not {mode!r}")
    cols = ", ".join(COLUMNS)
    # Fixed column list and a bound parameter: no user text reaches the SQL.
    stmt = text(f"SELECT {cols} FROM accuracy_30d WHERE mode = :mode")  # noqa: S608
    with engine.connect() as conn:
        df = pd.DataFrame(conn.execute(stmt, {"mode": mode}).all(), columns=COLUMNS)
    for c in ("n", "hits"):
        df[c] = df[c].astype("int64")
    for c in ("window_start", "window_end"):  # SQLite views return dates as text
        df[c] = pd.to_datetime(df[c]).dt.date
    df["beats_always_up"] = df["direction_accuracy"] > df["always_up_accuracy"]
    df["beats_persistence"] = df["direction_accuracy"] > df["persistence_accuracy"]
    tests = skill_by_ticker(engine, mode, df)
    df["model_only"] = [tests[t].model_only for t in df["ticker"]]
    df["up_only"] = [tests[t].up_only for t in df["ticker"]]
    df["skill_p_value"] = [tests[t].p_value for t in df["ticker"]]
    return df.sort_values(["direction_accuracy", "ticker"], ascending=[False, True]).reset_index(drop=True)


def skill_by_ticker(engine: Engine, mode: str, board: pd.DataFrame) -> dict[str, SkillTest]:
    """The exact test of "the model beats always-up" per ticker, on the rows the view scored.

    The view's window per ticker (window_start..window_end) picks the rows; computed here in Python
    from the stored direction flags (a view cannot run an exact binomial tail on both databases).
    """
    tests = {t: SkillTest(0, 0) for t in board["ticker"]}
    if board.empty:
        return tests
    s = snapshots.c
    stmt = select(
        s.ticker, s.run_date, s.next_day_direction_correct, s.next_day_actual, s.run_date_close
    ).where(
        s.ticker.in_(list(tests)),
        s.next_day_actual.is_not(None),
        s.run_date >= board["window_start"].min(),
        s.run_date <= board["window_end"].max(),
    )
    if mode != "all":
        stmt = stmt.where(s.mode == mode)
    with engine.connect() as conn:
        rows = pd.DataFrame(
            conn.execute(stmt).all(), columns=["ticker", "run_date", "right", "actual", "close"]
        )
    rows["run_date"] = pd.to_datetime(rows["run_date"]).dt.date
    spans = board.set_index("ticker")[["window_start", "window_end"]]
    for ticker, group in rows.groupby("ticker"):
        start, end = spans.loc[ticker]
        inside = group[(group["run_date"] >= start) & (group["run_date"] <= end)]
        tests[ticker] = discordant_counts(
            inside["right"].astype(bool).to_numpy(), (inside["actual"] > inside["close"]).to_numpy()
        )
    return tests


def verdict(df: pd.DataFrame) -> str:
    """One plain sentence about the always-up baseline."""
    if df.empty:
        return "No filled snapshots in the window yet: nothing to score."
    beat = int(df["beats_always_up"].sum())
    if beat == 0:
        return f"No model beats the always-up baseline ({len(df)} tickers scored)."
    # A higher accuracy on 30 days is often luck: say how many the exact test supports.
    significant = int((df["skill_p_value"] <= SIGNIFICANCE).sum()) if "skill_p_value" in df else 0
    tested = f" ({significant} with p <= {SIGNIFICANCE:g} in the exact test)"
    if beat < len(df):
        return f"{beat} of {len(df)} models beat always-up{tested}; {len(df) - beat} do not."
    return f"All {len(df)} models beat always-up{tested}."


def recent_next_day(engine: Engine, tickers: list[str], sessions: int = 30) -> pd.DataFrame:
    """Filled next-day predictions of these tickers, the last `sessions` run dates each (read-only)."""
    s = snapshots.c
    stmt = (
        select(s.ticker, s.run_date, s.next_day_date, s.next_day_pred, s.next_day_actual)
        .where(s.ticker.in_(tickers), s.next_day_actual.is_not(None))
        .order_by(s.ticker, s.run_date, s.id)
    )
    with engine.connect() as conn:
        df = pd.DataFrame(
            conn.execute(stmt).all(), columns=["ticker", "run_date", "target", "pred", "actual"]
        )
    # One row per (ticker, evening): the newest model's when a rerun after a promotion added a second.
    df = df.drop_duplicates(["ticker", "run_date"], keep="last")
    return df.groupby("ticker", group_keys=False).tail(sessions)
