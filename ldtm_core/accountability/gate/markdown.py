"""A gate report as Markdown (Dagster run metadata, the webhook payload, the dashboard), rendered from
the report's rows (`gate.tables`): both sides on the shared rows beside each gate baseline, the paired
tests, the decision with its evidence and rule."""

from __future__ import annotations

from ldtm_core.accountability.gate import tables
from ldtm_core.accountability.gate.champion_challenger import ABSOLUTE


def markdown(report) -> str:
    c = report.comparison
    rows = tables.comparison(report)
    lines = [
        f"**{report.ticker} model {report.model_id}: {report.decision.upper()}** ({report.policy} policy; "
        f"evidence: {c.evidence if c else ABSOLUTE})",
        "",
        *_table(rows),
        "",
        *(f"- {note}" for note in tables.comparison_notes(report)),
        f"- rule: {report.rule}",
    ]
    failing = "; ".join(x.describe() for x in report.failing)
    if failing:
        lines.append(f"- failing: {failing}")
    return "\n".join(lines)


def _table(rows: tables.Rows) -> list[str]:
    return [
        "| " + " | ".join(rows.header) + " |",
        "|" + "---|" * len(rows.header),
        *("| " + " | ".join(cells) + " |" for cells in rows.cells),
    ]
