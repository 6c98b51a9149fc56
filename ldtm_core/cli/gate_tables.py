"""How `ldtm gate` shows a gate report: the report's rows (`accountability.gate.tables`, which the
Markdown renders too) as terminal tables and lines."""

from __future__ import annotations

from rich.markup import escape
from rich.table import Table

from ldtm_core.accountability.gate import tables


def _rich(rows: tables.Rows) -> Table:
    table = Table(*(escape(h) for h in rows.header), title=escape(rows.title) or None)
    for cells in rows.cells:
        table.add_row(*(escape(c) for c in cells))
    return table


def comparison_table(report) -> Table:
    return _rich(tables.comparison(report))


def comparison_lines(report) -> list[str]:
    return tables.comparison_notes(report)


def baselines_table(report) -> Table:
    return _rich(tables.baselines(report))
