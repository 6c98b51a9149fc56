"""The leaderboard (SPEC §9): rows of the `accuracy_30d` view plus the plain verdict against always-up.

The ticker leaderboard scores exactly one prediction per (ticker, evening): the first one recorded,
i.e. what was published; a model promoted later and re-predicting the same evening does not count
twice. In-sample replays (the model's data cutoff reaches the next-day target) are left out unless
asked for. `leaderboard_by_model` is the separate per-model report: each version on its own rows.
Extra columns (e.g. a significance test) can be added to the returned frames without touching SQL.
"""

from __future__ import annotations

import math

import pandas as pd
from sqlalchemy import Engine, select, text

from .errors import InputError
from .schema import snapshots

MODES = ("all", "live", "replay")
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


# The views (migration 0005): first row per evening, out of sample / with in-sample rows / per model.
TICKER_VIEW = "accuracy_30d"
TICKER_VIEW_WITH_IN_SAMPLE = "accuracy_30d_with_in_sample"
MODEL_VIEW = "accuracy_30d_by_model"


def leaderboard(engine: Engine, mode: str = "all", include_in_sample: bool = False) -> pd.DataFrame:
    """One row per ticker for `mode` (all / live / replay), best direction accuracy first.

    Each (ticker, evening) counts once: its first recorded prediction. `include_in_sample` adds the
    in-sample replays back. `beats_always_up` / `beats_persistence` are True only when the model is
    strictly more accurate than the baseline on the same rows.
    """
    view = TICKER_VIEW_WITH_IN_SAMPLE if include_in_sample else TICKER_VIEW
    df = _read(engine, view, COLUMNS, mode)
    return df.sort_values(["direction_accuracy", "ticker"], ascending=[False, True]).reset_index(drop=True)


def leaderboard_by_model(engine: Engine, mode: str = "all") -> pd.DataFrame:
    """Per-model accuracy: one row per (ticker, model_version), each version on its own out-of-sample rows."""
    cols = ["ticker", "model_version", *COLUMNS[1:]]
    df = _read(engine, MODEL_VIEW, cols, mode)
    return df.sort_values(["ticker", "model_version"]).reset_index(drop=True)


def _read(engine: Engine, view: str, columns: list[str], mode: str) -> pd.DataFrame:
    if mode not in MODES:
        raise InputError(f"leaderboard mode must be one of {', '.join(MODES)}, not {mode!r}")
    cols = ", ".join(columns)
    # Fixed view and column names from this module and a bound parameter: no user text reaches the SQL.
    stmt = text(f"SELECT {cols} FROM {view} WHERE mode = :mode")  # noqa: S608
    with engine.connect() as conn:
        df = pd.DataFrame(conn.execute(stmt, {"mode": mode}).all(), columns=columns)
    for c in ("n", "hits"):
        df[c] = df[c].astype("int64")
    for c in ("window_start", "window_end"):  # SQLite views return dates as text
        df[c] = pd.to_datetime(df[c]).dt.date
    df["beats_always_up"] = df["direction_accuracy"] > df["always_up_accuracy"]
    df["beats_persistence"] = df["direction_accuracy"] > df["persistence_accuracy"]
    return df


def verdict(df: pd.DataFrame) -> str:
    """One plain sentence about the always-up baseline."""
    if df.empty:
        return "No filled snapshots in the window yet: nothing to score."
    beat = int(df["beats_always_up"].sum())
    if beat == 0:
        return f"No model beats the always-up baseline ({len(df)} tickers scored)."
    if beat < len(df):
        return f"{beat} of {len(df)} models beat always-up; {len(df) - beat} do not."
    return f"All {len(df)} models beat always-up."


def recent_next_day(engine: Engine, tickers: list[str], sessions: int = 30) -> pd.DataFrame:
    """Filled next-day predictions of these tickers, the last `sessions` run dates each (read-only)."""
    s = snapshots.c
    stmt = (
        select(s.ticker, s.run_date, s.next_day_date, s.next_day_pred, s.next_day_actual, s.in_sample)
        .where(s.ticker.in_(tickers), s.next_day_actual.is_not(None))
        .order_by(s.ticker, s.run_date, s.id)
    )
    with engine.connect() as conn:
        df = pd.DataFrame(
            conn.execute(stmt).all(), columns=["ticker", "run_date", "target", "pred", "actual", "in_sample"]
        )
    # One row per (ticker, evening): the first recorded, out of sample, as the leaderboard scores it.
    df = df.drop_duplicates(["ticker", "run_date"], keep="first")
    df = df[~df.pop("in_sample").astype(bool)]
    return df.groupby("ticker", group_keys=False).tail(sessions)
