"""A gate report as Markdown (Dagster run metadata, the webhook payload, the dashboard): both sides on
the shared rows, always-up and persistence on the same rows, discordant counts, p-values, the decision
with its evidence and rule."""

from __future__ import annotations

from ldtm_core.accountability.gate.champion_challenger import ABSOLUTE, Comparison
from ldtm_core.scoring.baselines import gate_baselines
from ldtm_core.scoring.paired import HORIZON_LABELS
from ldtm_core.scoring.skill import format_p_value


def markdown(report) -> str:
    """A gate report as a Markdown table (Dagster run metadata, the dashboard): both sides on the shared
    rows, always-up and persistence on the same rows, discordant counts, p-values, the decision and rule."""
    c: Comparison | None = report.comparison
    lines = [
        f"**{report.ticker} model {report.model_id}: {report.decision.upper()}** ({report.policy} policy; "
        f"evidence: {c.evidence if c else ABSOLUTE})",
        "",
    ]
    p = c.paired if c else None
    if p is not None and p.n:
        which = gate_baselines()
        lines += [
            f"| on the same {p.n} rows | {p.challenger} | {p.champion} | "
            + "".join(f"{b.label} | " for b in which).rstrip(),
            "|---|---|---|" + "---|" * len(which),
        ]
        up = p.baselines.get("always_up")
        lines.append(
            f"| direction accuracy | {_pct(p.challenger_accuracy)} | {_pct(p.champion_accuracy)} | "
            + "".join(
                f"{_pct(got.accuracy) if (got := p.baselines.get(b.name)) else '—'} | " for b in which
            ).rstrip()
        )
        for e in p.errors:
            lines.append(
                f"| mean abs error {HORIZON_LABELS[e.horizon]} ({e.n} rows) | {e.challenger_mae:.3f}% | "
                f"{e.champion_mae:.3f}% |" + " |" * len(which)
            )
        lines += [
            "",
            f"- disagreements: {p.challenger} right on {p.challenger_only}, {p.champion} on "
            f"{p.champion_only}; exact McNemar p ({p.challenger} better) = {format_p_value(p.p_better)}, "
            f"p ({p.champion} better) = {format_p_value(p.p_worse)}",
        ]
        holm = p.errors_worse_holm
        lines += [
            f"- |error| {HORIZON_LABELS[e.horizon]}: Diebold-Mariano (HAC lag {e.lag}, HLN) p "
            f"({p.challenger} worse) = {format_p_value(e.p_worse)}, Holm over the horizons "
            f"{format_p_value(holm[e.horizon])}"
            for e in p.errors
        ]
        if up:
            lines.append(f"- {p.challenger} vs always-up: p = {format_p_value(up.p_value)}")
    else:
        lines += [
            f"| on the same {report.n} rows | candidate | always-up |",
            "|---|---|---|",
            f"| direction accuracy | {_pct(report.direction_accuracy)} | {_pct(report.always_up_accuracy)} |",
            f"| mean abs error next day | {report.mean_abs_pct_error:.3f}% | |",
            "",
        ]
    if c and c.note:
        lines.append(f"- {c.note}")
    if report.trials is not None:
        lines.append(f"- {report.trials.describe()}")
    if c and c.champion_backtest_id:
        lines.append(f"- champion folds reused {c.reused_folds}, refit {c.refit_folds}")
    lines.append(f"- rule: {report.rule}")
    failing = "; ".join(x.describe() for x in report.failing)
    if failing:
        lines.append(f"- failing: {failing}")
    return "\n".join(lines)


def _pct(x: float) -> str:
    return "—" if x is None or x != x else f"{x * 100:.2f}%"
