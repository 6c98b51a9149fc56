"""`ldtm models` (submitted models: register, judge, promote) and `ldtm submit`: models LDTM cannot run,
their forecasts submitted as files and judged on their live record (accountability.submissions)."""

from __future__ import annotations

import typer
from rich.table import Table

from ldtm_core.cli.common import app, console, handle_errors, open_db, settings
from ldtm_core.data.universe import load_universe

models_app = typer.Typer(
    help="Models LDTM cannot run: register, judge and promote them.", no_args_is_help=True
)
app.add_typer(models_app, name="models")


@models_app.command("register")
@handle_errors
def register_cmd(
    external: str = typer.Option(
        ..., "--external", help="the submitted model's name (lower case, digits, _ -)"
    ),
    tickers: str = typer.Option(None, "--tickers", "-t", help="comma list; default: the configured universe"),
    description: str = typer.Option("", "--description", help="what the model is, in the owner's words"),
) -> None:
    """Register a model whose forecasts are submitted (`ldtm submit NAME FILE`): one candidate row per
    ticker. It publishes nothing until promoted on its live record (`ldtm models promote NAME`)."""
    from ldtm_core.accountability.submissions.external import register

    cfg = settings()
    wanted = load_universe(tickers or cfg.universe)
    ids = register(open_db(cfg), external, wanted, description)
    console.print(f"registered submitted model {external} for {len(ids)} ticker(s): {' '.join(ids)}")


@models_app.command("judge")
@handle_errors
def judge_cmd(name: str = typer.Argument(..., help="a registered submitted model")) -> None:
    """The submitted model's live record per ticker: hits, its e-values against a coin, each board baseline
    and the champion on the same evenings, and where that shows it (anytime-valid: read it any evening)."""
    from ldtm_core.accountability.submissions.judge import judge

    print_judgement(judge(open_db(), name))


def print_judgement(verdict) -> None:
    """A submitted model's judgement as `ldtm models judge` prints it (and `ldtm leaderboard --submitted`)."""
    from ldtm_core.accountability.submissions.judge import CHAMPION, RULE
    from ldtm_core.scoring.baselines import board_baselines
    from ldtm_core.scoring.evidence import COIN

    name = verdict.name
    which = [COIN, *(b.name for b in board_baselines()), CHAMPION]
    table = Table(
        "ticker", "n", "hits", *(f"e vs {c}" for c in which), "shown", "promote", title=f"{name}: live record"
    )
    for t, row in verdict.table.iterrows():
        table.add_row(
            str(t),
            str(int(row["n"])),
            f"{row['hits'] / row['n']:.1%}" if row["n"] else "—",
            *(f"{row[f'{c}_e']:.3g}" for c in which),
            "yes" if row["shown"] else "no",
            "yes" if row["promote"] else "no",
        )
    console.print(table)
    console.print(f"judged at e-BH level {verdict.level:.4g} (trial {verdict.trial}): {RULE}", soft_wrap=True)
    console.print(f"what it could detect: {verdict.detectable}", soft_wrap=True)
    console.print(f"shown on {len(verdict.shown)} of {len(verdict.table)} ticker(s)")


@models_app.command("promote")
@handle_errors
def promote_cmd(name: str = typer.Argument(..., help="a registered submitted model")) -> None:
    """Promote the submitted model on every ticker its live record shows (`ldtm models judge`): from its
    next submission it publishes there; an evening it misses, the previous champion publishes."""
    from ldtm_core.accountability.submissions.judge import promote

    done = promote(open_db(), name)
    for p in done:
        console.print(f"{p.ticker}: {name} is the champion (model {p.model_id}, {p.version})")
    console.print(f"promoted on {len(done)} ticker(s)")


@app.command("submit")
@handle_errors
def submit_cmd(
    name: str = typer.Argument(..., help="a registered submitted model"),
    path: str = typer.Argument(
        ..., help="CSV or Parquet: ticker, run_date, horizon, and expected_return and/or direction (next_day)"
    ),
    late: bool = typer.Option(
        False, "--late", help="past the cut-off: record it as a replay (kept, never scored as live)"
    ),
) -> None:
    """Record one submission of a submitted model: checked whole, then written, chained and receipted in
    one go, or refused naming the row and the rule with nothing written."""
    from ldtm_core.accountability.submissions.submit import submit

    cfg = settings()
    result = submit(open_db(cfg), cfg, name, path, late=late)
    days = ", ".join(d.isoformat() for d in result.run_dates)
    console.print(
        f"{name}: {result.rows_written} row(s) recorded ({result.mode}), {result.rows_existing} already there, "
        f"{len(result.tickers)} ticker(s), run date(s) {days}; cut-off "
        + ", ".join(f"{d} {c} New York" for d, c in result.cutoff.items())
        + (f"; publishes {' '.join(result.published)}" if result.published else "")
        + (f"; receipt {result.receipt.path.name}" if result.receipt else ""),
        soft_wrap=True,
    )
