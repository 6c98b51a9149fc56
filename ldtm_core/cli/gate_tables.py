"""How `ldtm gate` shows a gate report: the baselines (scoring.baselines) on the same rows and the paired comparison with
the champion, each with its counts and p-values."""

from __future__ import annotations

from rich.table import Table

from ldtm_core.cli.common import fmt_num, fmt_pct


def comparison_table(report) -> Table:
    """Both sides on the shared rows: accuracy and |error| per horizon, beside each gate
    baseline (scoring.baselines) on the same rows."""
    from ldtm_core.scoring.baselines import gate_baselines
    from ldtm_core.scoring.paired import HORIZON_LABELS

    c = report.comparison
    p = c.paired
    table = Table(title=f"{report.ticker}: {c.evidence}, decision {c.decision.upper()}")
    if p is None or not p.n:
        table.add_column("paired comparison")
        table.add_row(c.note or "no shared rows")
        return table
    which = gate_baselines()
    for col in (f"on the same {p.n} rows", p.challenger, p.champion, *(b.label for b in which)):
        table.add_column(col)
    table.add_row(
        "direction accuracy",
        fmt_pct(p.challenger_accuracy),
        fmt_pct(p.champion_accuracy),
        *(fmt_pct(got.accuracy) if (got := p.baselines.get(b.name)) else "" for b in which),
    )
    for e in p.errors:
        table.add_row(
            f"mean |err| {HORIZON_LABELS[e.horizon]} ({e.n} rows)",
            f"{fmt_num(e.challenger_mae)}%",
            f"{fmt_num(e.champion_mae)}%",
            *("" for _ in which),
        )
    return table


def comparison_lines(report) -> list[str]:
    from ldtm_core.scoring.paired import HORIZON_LABELS
    from ldtm_core.scoring.skill import format_p_value

    c = report.comparison
    p = c.paired
    out = []
    if p is not None and p.n:
        out.append(
            f"disagreements: {p.challenger} right on {p.challenger_only}, {p.champion} on {p.champion_only}; "
            f"exact McNemar p ({p.challenger} better) = {format_p_value(p.p_better)}, "
            f"p ({p.champion} better) = {format_p_value(p.p_worse)}"
        )
        holm = p.errors_worse_holm
        out += [
            f"|error| {HORIZON_LABELS[e.horizon]}: Diebold-Mariano (HAC lag {e.lag}, HLN) p ({p.challenger} "
            f"worse) = {format_p_value(e.p_worse)}, Holm over the horizons {format_p_value(holm[e.horizon])}"
            for e in p.errors
        ]
    if c.champion_backtest_id:
        out.append(
            f"champion backtest {c.champion_backtest_id}: folds reused {c.reused_folds}, refit {c.refit_folds}"
        )
    if c.note and p is not None and p.n:  # without paired rows the table above shows the note
        out.append(c.note)
    if report.trials is not None:
        out.append(report.trials.describe())
    return out


def baselines_table(report) -> Table:
    """The model beside each baseline on the same rows, with the exact paired test."""
    from ldtm_core.scoring.baselines import gate_baselines
    from ldtm_core.scoring.skill import format_p_value

    table = Table(
        "on the same rows",
        "accuracy",
        "model only / baseline only",
        "p (model beats it)",
        title=f"{report.ticker}: {report.n} rows over {report.folds} folds; decision "
        f"{report.decision.upper()} ({report.rule})",
    )
    table.add_row("model", fmt_pct(report.direction_accuracy), "", "")
    for base in gate_baselines():
        b = report.baselines.get(base.name)
        if b is None:
            table.add_row(base.label, "unknown", "backtest predates it", "")
        else:
            table.add_row(
                base.label,
                fmt_pct(b.accuracy),
                f"{b.model_only} / {b.base_only}",
                format_p_value(b.p_value),
            )
    return table
