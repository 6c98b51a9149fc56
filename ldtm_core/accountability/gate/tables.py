"""A gate report's rows, written once: the Markdown (Dagster metadata, the webhook, the dashboard) and
`ldtm gate`'s tables render these, so a figure or a baseline shows the same everywhere."""

from __future__ import annotations

from dataclasses import dataclass

from ldtm_core.scoring.baselines import gate_baselines
from ldtm_core.scoring.paired import HORIZON_LABELS
from ldtm_core.scoring.skill import format_p_value


@dataclass(frozen=True)
class Rows:
    """One table: its title (may be empty), column heads and cells, all text."""

    title: str
    header: list[str]
    cells: list[list[str]]


def pct(x: float | None) -> str:
    return "—" if x is None or x != x else f"{x * 100:.2f}%"


def comparison(report) -> Rows:
    """Both sides on the shared rows (accuracy, |error| per horizon) beside each gate baseline on the
    same rows; without paired rows, the candidate beside always-up on its own backtest."""
    c = report.comparison
    p = c.paired if c else None
    title = f"{report.ticker}: {c.evidence}, decision {c.decision.upper()}" if c else ""
    if p is None or not p.n:
        return Rows(
            title,
            [f"on the same {report.n} rows", "candidate", "always-up"],
            [
                ["direction accuracy", pct(report.direction_accuracy), pct(report.always_up_accuracy)],
                ["mean abs error next day", f"{report.mean_abs_pct_error:.3f}%", ""],
            ],
        )
    which = gate_baselines()
    # "no change": the run-date close as the forecast, the naive comparator of the |errors| (no direction).
    header = [f"on the same {p.n} rows", p.challenger, p.champion, *(b.label for b in which), "no change"]
    accuracy = [pct(got.accuracy) if (got := p.baselines.get(b.name)) else "—" for b in which]
    cells = [["direction accuracy", pct(p.challenger_accuracy), pct(p.champion_accuracy), *accuracy, "—"]]
    cells += [
        [
            f"mean abs error {HORIZON_LABELS[e.horizon]} ({e.n} rows)",
            f"{e.challenger_mae:.3f}%",
            f"{e.champion_mae:.3f}%",
            *("" for _ in which),
            f"{e.naive_mae:.3f}%",
        ]
        for e in p.errors
    ]
    return Rows(title, header, cells)


def comparison_notes(report) -> list[str]:
    """The paired tests in words, then where the champion's folds came from, the note and the trials."""
    c = report.comparison
    p = c.paired if c else None
    out = []
    if p is not None and p.n:
        out.append(
            f"disagreements: {p.challenger} right on {p.challenger_only}, {p.champion} on {p.champion_only}; "
            f"exact McNemar p ({p.challenger} better) = {format_p_value(p.p_better)}, "
            f"p ({p.champion} better) = {format_p_value(p.p_worse)}"
        )
        holm = p.errors_worse_holm
        tested = sum(not e.too_short for e in p.errors)
        out += [
            f"|error| {HORIZON_LABELS[e.horizon]}: not tested, {e.n} rows ({e.p_text(e.p_worse)}); not in the "
            "Holm family"
            if e.too_short
            else f"|error| {HORIZON_LABELS[e.horizon]}: Diebold-Mariano (EWC t({e.dof})) p ({p.challenger} "
            f"worse by more than {e.margin:.3g} points) = {format_p_value(e.p_worse)}, Holm over the "
            f"{tested} horizon(s) tested {format_p_value(holm[e.horizon])}"
            for e in p.errors
        ]
        if up := p.baselines.get("always_up"):
            out.append(f"{p.challenger} vs always-up: p = {format_p_value(up.p_value)}")
    if c and c.champion_backtest_id:
        out.append(
            f"champion backtest {c.champion_backtest_id}: folds reused {c.reused_folds}, refit {c.refit_folds}"
        )
    if c and c.note:
        out.append(c.note)
    if report.trials is not None:
        out.append(report.trials.describe())
    return out


def baselines(report) -> Rows:
    """The model beside each gate baseline on its backtest's rows, with the exact paired test."""
    cells = [["model", pct(report.direction_accuracy), "", ""]]
    for base in gate_baselines():
        b = report.baselines.get(base.name)
        cells.append(
            [base.label, "unknown", "backtest predates it", ""]
            if b is None
            else [base.label, pct(b.accuracy), f"{b.model_only} / {b.base_only}", format_p_value(b.p_value)]
        )
    return Rows(
        f"{report.ticker}: {report.n} rows over {report.folds} folds; decision {report.decision.upper()} "
        f"({report.rule})",
        ["on the same rows", "accuracy", "model only / baseline only", "p (model beats it)"],
        cells,
    )
