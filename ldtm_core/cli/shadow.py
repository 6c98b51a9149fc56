"""Shadow models: the live champion-vs-shadow record, its conclusion, and ending one by hand."""

from __future__ import annotations

import typer
from rich.table import Table

from ldtm_core.cli.common import app, console, fmt_num, fmt_pct, handle_errors, open_db, settings
from ldtm_core.errors import InputError

shadow_app = typer.Typer(
    help="Shadow models: champion vs shadow on the same live evenings (LDTM_SHADOW_SESSIONS).",
    no_args_is_help=True,
)
app.add_typer(shadow_app, name="shadow")


def print_side_by_side(df) -> None:
    """Champion vs shadow per ticker on the same filled evenings (also `ldtm leaderboard --shadow`)."""
    from ldtm_core.accountability.shadow.shadow import RULE
    from ldtm_core.scoring.skill import format_p_value

    if df.empty:
        console.print("no model in shadow")
        return
    table = Table(
        "ticker",
        "champion",
        "shadow",
        "evenings",
        "dir acc champion",
        "dir acc shadow",
        "champion only / shadow only",
        "p (champion better)",
        "|err| 1d champion",
        "|err| 1d shadow",
        "p (shadow errs more)",
        "decision",
        title="champion vs shadow, same filled evenings (shadow rows are never published)",
    )
    for r in df.itertuples(index=False):
        table.add_row(
            r.ticker,
            r.champion or "",
            f"model {r.shadow_model_id}",
            f"{r.evenings}/{r.required}",
            fmt_pct(r.champion_accuracy),
            fmt_pct(r.shadow_accuracy),
            f"{r.champion_only} / {r.shadow_only}",
            format_p_value(r.direction_p),
            fmt_num(r.champion_mae),
            fmt_num(r.shadow_mae),
            format_p_value(r.error_p),
            r.decision,
        )
    console.print(table)
    for r in df.itertuples(index=False):
        if getattr(r, "note", ""):
            label = "[red]ENDS[/]" if r.decision == "ended" else "design"
            console.print(f"{r.ticker} {label}: {r.note}", highlight=False, soft_wrap=True)
    console.print(f"rule: {RULE}", highlight=False, soft_wrap=True)


@shadow_app.command("status")
@handle_errors
def shadow_status() -> None:
    """Every model in shadow beside its champion: paired evenings so far, figures, pending decision."""
    from ldtm_core.accountability.shadow.shadow import design_for, side_by_side

    cfg = settings()
    print_side_by_side(side_by_side(open_db(cfg), cfg))
    if cfg.shadow_sessions > 0:
        console.print(f"a shadow started now: {design_for(cfg).describe()}", highlight=False, soft_wrap=True)


@shadow_app.command("conclude")
@handle_errors
def shadow_conclude(ticker: str = typer.Option(None, "--ticker", help="Only this ticker")) -> None:
    """Promote or retire each shadow that has its filled evenings (what the nightly does after fillback)."""
    from ldtm_core.accountability.shadow.shadow import conclude, conclude_all

    cfg = settings()
    engine = open_db(cfg)
    outcomes = [conclude(engine, cfg, ticker)] if ticker else conclude_all(engine, cfg)
    outcomes = [o for o in outcomes if o is not None]
    if not outcomes:
        console.print("no model in shadow")
    for o in outcomes:
        console.print(o.comparison.summary(), highlight=False, soft_wrap=True)
        if o.error:
            console.print(f"[red]not carried out:[/] {o.error}", highlight=False, soft_wrap=True)
    if any(o.error for o in outcomes):
        raise typer.Exit(1)


@shadow_app.command("end")
@handle_errors
def shadow_end(
    ticker: str = typer.Argument(..., help="Ticker whose shadow to end"),
    promote: bool = typer.Option(False, "--promote", help="Promote the shadow now"),
    retire: bool = typer.Option(False, "--retire", help="Retire the shadow now (the champion stays)"),
    reason: str = typer.Option(..., "--reason", help="Why (recorded in the registry history)"),
) -> None:
    """End a shadow early by hand, whatever its live record says so far (logged with that record).
    Exactly one of --promote and --retire."""
    from ldtm_core.accountability.shadow.shadow import end_shadow

    if promote == retire:  # both (a flag pair let the last one win) or neither
        raise InputError("shadow end: give exactly one of --promote and --retire")
    cfg = settings()
    out = end_shadow(open_db(cfg), cfg, ticker, "promote" if promote else "retire", reason)
    console.print(out.comparison.summary(), highlight=False, soft_wrap=True)
    if out.promoted is not None:
        console.print(f"promoted: version {out.promoted.version} -> {out.promoted.promoted_path}")
