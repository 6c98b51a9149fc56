"""The leaderboard's picture, rendered in the Dagster UI as a PNG inside Markdown metadata.

Top: predicted vs actual next-day close over the last 30 filled sessions for the leading tickers.
Bottom: each ticker's next-day direction accuracy (with its 95% Wilson interval) beside always-up.
Presentation only: the numbers come from the leaderboard and the stored snapshot rows.
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")  # headless: code servers and run workers have no display

import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
from sqlalchemy import Engine  # noqa: E402

from ldtm_core.accountability.board.reads import recent_next_day  # noqa: E402

from .metadata import png_markdown  # noqa: E402

PANELS = 4


def leaderboard_figure_markdown(engine: Engine, table: pd.DataFrame) -> str | None:
    if table.empty:
        return None
    leaders = list(table["ticker"][:PANELS])
    recent = recent_next_day(engine, leaders)
    fig = plt.figure(figsize=(11, 7.5))
    grid = fig.add_gridspec(2, len(leaders), height_ratios=[1, 1.2])
    for i, ticker in enumerate(leaders):
        ax = fig.add_subplot(grid[0, i])
        part = recent[recent["ticker"] == ticker]
        ax.plot(pd.to_datetime(part["target"]), part["actual"], label="actual", color="black", linewidth=1.2)
        ax.plot(
            pd.to_datetime(part["target"]), part["pred"], label="predicted", color="tab:blue", linewidth=1.0
        )
        ax.set_title(f"{ticker}: next-day close", fontsize=9)
        ax.tick_params(labelsize=7)
        ax.tick_params(axis="x", rotation=45)
        if i == 0:
            ax.legend(fontsize=7)
    ax = fig.add_subplot(grid[1, :])
    order = table.sort_values("direction_accuracy", ascending=False)
    x = range(len(order))
    acc = order["direction_accuracy"].astype(float)
    err = [acc - order["wilson_low"].astype(float), order["wilson_high"].astype(float) - acc]
    ax.bar(
        [i - 0.2 for i in x],
        acc,
        width=0.4,
        yerr=err,
        capsize=2,
        label="model (95% Wilson)",
        color="tab:blue",
    )
    ax.bar(
        [i + 0.2 for i in x],
        order["always_up_accuracy"].astype(float),
        width=0.4,
        label="always-up",
        color="tab:gray",
    )
    ax.axhline(0.5, color="black", linewidth=0.6, linestyle=":")
    ax.set_xticks(
        list(x), order["ticker"], rotation=90 if len(order) > 20 else 0, fontsize=6 if len(order) > 20 else 8
    )
    ax.set_ylim(0, 1)
    ax.set_ylabel("next-day direction accuracy")
    ax.legend(fontsize=8)
    fig.tight_layout()
    md = png_markdown(fig, "leaderboard")
    plt.close(fig)
    return md
