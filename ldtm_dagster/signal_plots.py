"""The signal-performance picture in the Dagster UI: the books' equity curves against the benchmark,
as a PNG inside Markdown metadata (presentation only: the numbers are SignalReport's)."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")  # headless: code servers and run workers have no display

import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from ldtm_core.accountability.signals.execution import tag  # noqa: E402
from ldtm_core.accountability.signals.signals import SignalReport  # noqa: E402

from .metadata import png_markdown  # noqa: E402

POINTS = 400  # drawn per line at most: five years of evenings as a picture, the table has the numbers


def _thin(frame: pd.DataFrame) -> pd.DataFrame:
    step = -(-len(frame) // POINTS)
    if step <= 1:
        return frame
    keep = list(range(0, len(frame), step))
    return frame.iloc[keep if keep[-1] == len(frame) - 1 else [*keep, len(frame) - 1]]


def equity_figure_markdown(report: SignalReport) -> str | None:
    if not report.evenings:
        return None
    # One panel: the equity curves (the drawdown is in the summary table and on the dashboard page).
    fig, top = plt.subplots(figsize=(9, 4))
    for name, part in report.equity().groupby("series", sort=False):
        part = _thin(part)
        top.plot(pd.to_datetime(part["run_date"]), part["value"], label=name, linewidth=1.2)
    top.set_ylabel(f"growth of 1 (net of {report.cost_bp:g} bp)")
    top.set_title(f"executed {tag(report.execution)}", fontsize=9)  # the rule every figure is traded by
    top.legend(fontsize=8)
    top.tick_params(axis="x", rotation=30)
    md = png_markdown(fig, "signal performance")
    plt.close(fig)
    return md
