"""`ldtm universe`: the configured universe's tickers, and its dated membership (import a history, show
the members as of a day)."""

from __future__ import annotations

import typer
from rich.markup import escape

from ldtm_core.cli.common import app, console, err_console, handle_errors, open_db, parse_date, settings
from ldtm_core.data.universe import load_universe
from ldtm_core.errors import InputError

universe_app = typer.Typer(
    help="The ticker universe (no subcommand: list its tickers) and its membership history.",
    invoke_without_command=True,
)
app.add_typer(universe_app, name="universe")


@universe_app.callback()
@handle_errors
def universe(
    ctx: typer.Context,
    spec: str = typer.Option(
        None, "--universe", "-u", help="demo, full, a comma list or a file; default LDTM_UNIVERSE"
    ),
) -> None:
    """List the tickers of the configured universe (`import` / `show`: its membership history)."""
    if ctx.invoked_subcommand is not None:
        return
    tickers = load_universe(spec or settings().universe)
    console.print(f"{len(tickers)} tickers: " + " ".join(tickers))


@universe_app.command("import")
@handle_errors
def universe_import(
    path: str = typer.Argument(
        ..., help="instruments file: TICKER<TAB>START<TAB>END per line (END empty: a member)"
    ),
    dry_run: bool = typer.Option(
        False, "--dry-run", help="check the file and say what it holds; store nothing"
    ),
    allow_missing: bool = typer.Option(
        False,
        "--allow-missing",
        help="import even if tickers of LDTM_UNIVERSE have no span (they then count as members on no evening)",
    ),
) -> None:
    """Replace the stored membership history with FILE's spans (Qlib's instruments format). Refused
    when a ticker of LDTM_UNIVERSE has no span in FILE, unless --allow-missing."""
    from ldtm_core.data.calendar import market_today
    from ldtm_core.data.membership import import_membership, read_membership_file

    spans = read_membership_file(path)
    cfg = settings()
    tickers = sorted({s.ticker for s in spans})
    today = market_today()
    now = sorted({s.ticker for s in spans if s.covers(today)})
    console.print(
        f"{path}: {len(spans)} spans for {len(tickers)} tickers; {len(now)} members on {today}, "
        f"{len(tickers) - len(now)} no longer (or not yet)"
    )
    absent = [t for t in load_universe(cfg.universe) if t not in tickers]
    if absent:
        said = (
            f"{len(absent)} ticker(s) of LDTM_UNIVERSE={cfg.universe} have no span in {path}, so they would "
            f"count as members on no evening (never predicted, backtested or benchmarked): {' '.join(absent)}"
        )
        if not allow_missing:
            raise InputError(
                f"{said}. Nothing stored: add their spans, or pass --allow-missing to import it as it is"
            )
        err_console.print(f"[yellow]{escape(said)}[/]", highlight=False, soft_wrap=True)
    if dry_run:
        console.print("dry run: nothing was stored")
        return
    n = import_membership(open_db(cfg), spans, str(path))
    console.print(f"stored {n} spans in universe_membership (the previous history, if any, replaced)")


@universe_app.command("show")
@handle_errors
def universe_show(
    as_of: str = typer.Option(None, "--as-of", help="the day (YYYY-MM-DD; default today in New York)"),
) -> None:
    """The members on a day and the rule that chose them (stored history, or the list with none)."""
    from ldtm_core.data.calendar import market_today
    from ldtm_core.data.membership import load_membership
    from ldtm_core.data.universe import stated_as_of

    cfg = settings()
    day = parse_date(as_of, "--as-of") or market_today()
    membership = load_membership(open_db(cfg))
    configured = load_universe(cfg.universe)
    console.print(membership.rule(), highlight=False, soft_wrap=True)
    if not membership.has_history:
        stated = stated_as_of(cfg.universe)
        console.print(
            f"LDTM_UNIVERSE={cfg.universe}: membership as of {stated or 'an unstated day'}, no history",
            highlight=False,
        )
        console.print(f"{len(configured)} members on {day}: " + " ".join(configured), highlight=False)
        return
    members = membership.members(day, sorted(membership.spans))
    console.print(f"{len(members)} members on {day}: " + " ".join(members), highlight=False)
    outside = [t for t in members if t not in configured]
    if outside:
        console.print(
            f"[yellow]members on {day} outside LDTM_UNIVERSE={cfg.universe} (not served):[/] {' '.join(outside)}",
            highlight=False,
            soft_wrap=True,
        )


def _chosen(tickers: str, cfg) -> list[str]:
    """`--tickers`: a comma list, or `all` for LDTM_UNIVERSE."""
    from ldtm_core.data.universe import resolve_tickers

    return resolve_tickers(None if tickers.strip().lower() == "all" else tickers, load_universe(cfg.universe))


@universe_app.command("verdict")
@handle_errors
def universe_verdict_cmd(
    recipe: str = typer.Option(
        ..., "--recipe", "-r", help="the challenger recipe: its newest candidate per ticker"
    ),
    tickers: str = typer.Option("all", "--tickers", "-t", help="comma list, or 'all' for the universe"),
    alpha: float = typer.Option(None, "--alpha", help="the family's level (default LDTM_GATE_ALPHA)"),
    dry_run: bool = typer.Option(
        False, "--dry-run", help="judge without adding to the universe trials ledger"
    ),
) -> None:
    """Is RECIPE better than what serves now, over the universe? One date-clustered verdict (docs/reading-the-figures.md)."""
    from rich.table import Table

    from ldtm_core.accountability.gate.policy import GateThresholds
    from ldtm_core.accountability.gate.universe import universe_verdict
    from ldtm_core.cli.common import fmt_pct

    cfg = settings()
    chosen = _chosen(tickers, cfg)
    level = GateThresholds.from_env().alpha if alpha is None else alpha
    if not 0.0 < level < 1.0:
        raise InputError(f"--alpha must be within (0, 1), not {level}")
    v = universe_verdict(open_db(cfg), cfg, recipe, chosen, alpha=level, record=not dry_run)
    table = Table(
        "ticker", "rows", recipe, "champion", "champion recipe", title=f"universe verdict: {recipe}"
    )
    for r in v.per_ticker.itertuples():
        table.add_row(
            r.ticker,
            str(r.rows),
            fmt_pct(r.challenger_accuracy),
            fmt_pct(r.champion_accuracy),
            r.champion_recipe,
        )
    console.print(table)
    console.print(v.summary(), highlight=False, soft_wrap=True)
    for t, why in sorted(v.skipped.items()):
        err_console.print(f"[yellow]{t}[/]: {why}", highlight=False)
    if not dry_run:
        console.print(
            "recorded in the universe trials ledger"
            if v.recorded
            else "not recorded: judged before, or insufficient evidence"
        )


@universe_app.command("decide")
@handle_errors
def universe_decide_cmd(
    recipe: str = typer.Option(
        ..., "--recipe", "-r", help="the global recipe whose newest candidates to decide"
    ),
    tickers: str = typer.Option("all", "--tickers", "-t", help="comma list, or 'all' for the universe"),
) -> None:
    """Decide a global RECIPE's candidates as one universe (the universe policy): one date-clustered
    verdict against the champions, or on a first deployment against every baseline, applied to every
    member ticker's gate; each ticker's own figures shown beside it."""
    from rich.table import Table

    from ldtm_core.accountability.gate.universe_decision import decide
    from ldtm_core.cli.common import fmt_pct

    cfg = settings()
    chosen = _chosen(tickers, cfg)
    d = decide(open_db(cfg), cfg, recipe, chosen)
    for verdict in d.verdicts.values():
        console.print(verdict.summary(), highlight=False, soft_wrap=True)
    table = Table(
        "ticker",
        "decision",
        "own rows",
        "own dir acc",
        "always-up",
        "model",
        title=f"universe decision: {recipe}",
    )
    for t, r in sorted(d.reports.items()):
        table.add_row(
            t,
            r.decision,
            str(r.n),
            fmt_pct(r.direction_accuracy),
            fmt_pct(r.always_up_accuracy),
            str(r.model_id),
        )
    console.print(table)
    for t, why in sorted(d.skipped.items()):
        err_console.print(f"[yellow]{t}[/]: {why}", highlight=False, soft_wrap=True)
    console.print(
        f"promoted: {', '.join(d.promoted) or 'none'} (the champions keep serving elsewhere)", highlight=False
    )
