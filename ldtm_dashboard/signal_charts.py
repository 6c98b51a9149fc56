"""Altair charts of the Signals page (pure functions of SignalReport frames, so tests can read the specs)."""

from __future__ import annotations

import altair as alt
import pandas as pd

HEIGHT = 300


def equity_chart(equity: pd.DataFrame) -> alt.Chart:
    """Growth of 1 per evening: each net portfolio and the equal-weight universe."""
    data = equity.assign(run_date=pd.to_datetime(equity["run_date"]))
    return (
        alt.Chart(data)
        .mark_line()
        .encode(
            x=alt.X("run_date:T", title="evening"),
            y=alt.Y("value:Q", title="growth of 1 (net of costs)", scale=alt.Scale(zero=False)),
            color=alt.Color("series:N", title=None, legend=alt.Legend(orient="top")),
            tooltip=["series", alt.Tooltip("run_date:T"), alt.Tooltip("value:Q", format=".3f")],
        )
        .properties(height=HEIGHT)
    )


def drawdown_chart(drawdowns: pd.DataFrame) -> alt.Chart:
    data = drawdowns.assign(run_date=pd.to_datetime(drawdowns["run_date"]))
    return (
        alt.Chart(data)
        .mark_area(opacity=0.35, line=True)
        .encode(
            x=alt.X("run_date:T", title="evening"),
            y=alt.Y("drawdown:Q", title="drawdown", axis=alt.Axis(format="%"), stack=None),
            color=alt.Color("series:N", title=None, legend=alt.Legend(orient="top")),
            tooltip=["series", alt.Tooltip("run_date:T"), alt.Tooltip("drawdown:Q", format=".1%")],
        )
        .properties(height=220)
    )


def ic_chart(ic_daily: pd.DataFrame, window: int = 21) -> alt.Chart:
    """Each evening's rank IC (bars) and its trailing mean over `window` evenings (line)."""
    data = ic_daily.dropna(subset=["ic"]).copy()
    data["run_date"] = pd.to_datetime(data["run_date"])
    data["rolling"] = data["ic"].rolling(window, min_periods=max(2, window // 3)).mean()
    base = alt.Chart(data).encode(x=alt.X("run_date:T", title="evening"))
    bars = base.mark_bar(opacity=0.4, color="#90a4ae").encode(
        y=alt.Y("ic:Q", title="rank IC"),
        tooltip=[alt.Tooltip("run_date:T"), alt.Tooltip("ic:Q", format=".3f"), "names"],
    )
    line = base.mark_line(color="#1565c0").encode(y="rolling:Q")
    return (bars + line).properties(height=220)


def quintile_chart(quintiles: pd.DataFrame, horizon: str) -> alt.Chart:
    """Mean realised return of each quintile of predicted return (q1 lowest) for one horizon."""
    row = quintiles.set_index("horizon").loc[horizon]
    data = pd.DataFrame(
        {"quintile": [f"q{k}" for k in range(1, 6)], "return": [row[f"q{k}"] for k in range(1, 6)]}
    )
    return (
        alt.Chart(data)
        .mark_bar()
        .encode(
            x=alt.X("quintile:N", title="quintile of predicted return (q1 lowest)", sort=None),
            y=alt.Y("return:Q", title="mean realised return", axis=alt.Axis(format=".2%")),
            color=alt.condition(alt.datum["return"] > 0, alt.value("#2e7d32"), alt.value("#c62828")),
            tooltip=["quintile", alt.Tooltip("return:Q", format=".3%")],
        )
        .properties(height=220)
    )
