"""Altair charts for the dashboard (pure functions of DataFrames, so tests can inspect their specs).

Altair, not Plotly: Streamlit already depends on it (no extra package), its charts are declarative
Vega-Lite specs (JSON a test can read), and layered marks (point + interval rule + baseline tick) say
"accuracy beside always-up with its uncertainty" in a few lines.
"""

from __future__ import annotations

import altair as alt
import pandas as pd

HEIGHT = 320
DIRECTION_COLOURS = alt.Scale(
    domain=["bullish", "neutral", "bearish"], range=["#2e7d32", "#9e9e9e", "#c62828"]
)


def leaderboard_chart(board: pd.DataFrame) -> alt.Chart:
    """Per ticker: direction accuracy (dot) with its 95 % Wilson interval (bar) and always-up (tick)."""
    data = board[["ticker", "direction_accuracy", "wilson_low", "wilson_high", "always_up_accuracy", "n"]]
    order = data.sort_values("direction_accuracy", ascending=False)["ticker"].tolist()
    y = alt.Y("ticker:N", sort=order, title=None)
    base = alt.Chart(data)
    interval = base.mark_rule(strokeWidth=2, color="#90a4ae").encode(
        y=y,
        x=alt.X("wilson_low:Q", title="next-day direction accuracy", axis=alt.Axis(format="%")),
        x2="wilson_high:Q",
    )
    model = base.mark_circle(size=90, color="#1565c0").encode(
        y=y,
        x="direction_accuracy:Q",
        tooltip=[
            "ticker",
            "n",
            alt.Tooltip("direction_accuracy:Q", format=".1%"),
            alt.Tooltip("wilson_low:Q", format=".1%"),
            alt.Tooltip("wilson_high:Q", format=".1%"),
            alt.Tooltip("always_up_accuracy:Q", format=".1%"),
        ],
    )
    always_up = base.mark_tick(color="#ef6c00", thickness=3, size=18).encode(y=y, x="always_up_accuracy:Q")
    half = alt.Chart(pd.DataFrame({"x": [0.5]})).mark_rule(strokeDash=[4, 4], color="#616161").encode(x="x:Q")
    return (interval + model + always_up + half).properties(height=max(140, 28 * len(data)))


def predicted_vs_actual_chart(predictions: pd.DataFrame, horizon: str) -> alt.Chart:
    """Predicted and actual close on each target date of one horizon (actual only where filled)."""
    frame = predictions[[f"{horizon}_date", f"{horizon}_pred", f"{horizon}_actual", "run_date"]].rename(
        columns={
            f"{horizon}_date": "target_date",
            f"{horizon}_pred": "predicted",
            f"{horizon}_actual": "actual",
        }
    )
    long = frame.melt(
        ["target_date", "run_date"], ["predicted", "actual"], var_name="series", value_name="close"
    )
    long = long.dropna(subset=["close"])
    long["target_date"] = pd.to_datetime(long["target_date"])
    return (
        alt.Chart(long)
        .mark_line(point=True)
        .encode(
            x=alt.X("target_date:T", title="target date"),
            y=alt.Y("close:Q", title="close", scale=alt.Scale(zero=False)),
            color=alt.Color(
                "series:N", scale=alt.Scale(domain=["predicted", "actual"], range=["#1565c0", "#212121"])
            ),
            tooltip=[
                "series",
                alt.Tooltip("target_date:T"),
                alt.Tooltip("run_date:N", title="predicted on"),
                alt.Tooltip("close:Q", format=".2f"),
            ],
        )
        .properties(height=HEIGHT)
    )


def rolling_accuracy_chart(rolling: pd.DataFrame) -> alt.Chart:
    """Rolling 30-day next-day accuracy of the model against always-up on the same rows."""
    frame = rolling.rename(columns={"model": "model", "always_up": "always-up"})
    long = frame.melt(["run_date", "n"], ["model", "always-up"], var_name="series", value_name="accuracy")
    long["run_date"] = pd.to_datetime(long["run_date"])
    lines = (
        alt.Chart(long)
        .mark_line(point=True)
        .encode(
            x=alt.X("run_date:T", title="evening"),
            y=alt.Y(
                "accuracy:Q",
                title="30-day accuracy",
                axis=alt.Axis(format="%"),
                scale=alt.Scale(domain=[0, 1]),
            ),
            color=alt.Color(
                "series:N", scale=alt.Scale(domain=["model", "always-up"], range=["#1565c0", "#ef6c00"])
            ),
            tooltip=["series", alt.Tooltip("run_date:T"), "n", alt.Tooltip("accuracy:Q", format=".1%")],
        )
    )
    half = alt.Chart(pd.DataFrame({"y": [0.5]})).mark_rule(strokeDash=[4, 4], color="#616161").encode(y="y:Q")
    return (lines + half).properties(height=HEIGHT)


def cohort_chart(cohorts: pd.DataFrame) -> alt.Chart:
    """Bullish / neutral / bearish counts of every evening across the universe (stacked)."""
    long = cohorts.melt(
        "run_date", ["bullish", "neutral", "bearish"], var_name="direction", value_name="tickers"
    )
    long["run_date"] = pd.to_datetime(long["run_date"])
    return (
        alt.Chart(long)
        .mark_bar()
        .encode(
            x=alt.X("run_date:T", title="evening"),
            y=alt.Y("tickers:Q", stack="zero"),
            color=alt.Color("direction:N", scale=DIRECTION_COLOURS),
            tooltip=[alt.Tooltip("run_date:T"), "direction", "tickers"],
        )
        .properties(height=220)
    )


def timeline_chart(events: pd.DataFrame) -> alt.Chart:
    """Registry events of a ticker on a time axis, one lane per model."""
    frame = events.assign(model=events["model_id"].astype(str), at=pd.to_datetime(events["at"], utc=True))
    return (
        alt.Chart(frame)
        .mark_point(filled=True, size=110)
        .encode(
            x=alt.X("at:T", title="time"),
            y=alt.Y("model:N", title="model id"),
            color=alt.Color(
                "to:N",
                title="to status",
                scale=alt.Scale(
                    domain=["candidate", "active", "retired"], range=["#9e9e9e", "#2e7d32", "#6d4c41"]
                ),
            ),
            shape="to:N",
            tooltip=[alt.Tooltip("at:T", format="%Y-%m-%d %H:%M"), "model", "from", "to", "reason"],
        )
        .properties(height=max(120, 40 * frame["model"].nunique()))
    )
