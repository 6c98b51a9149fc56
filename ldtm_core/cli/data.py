"""Commands for data: db upgrade, ingest, prices summary (`ldtm universe`: cli/universe.py)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from ldtm_core.accountability.ledger.refill import refill_after_ingest
from ldtm_core.cli.common import app, console, err_console, handle_errors, open_db, parse_date, settings
from ldtm_core.config import masked_url
from ldtm_core.data.sources import ENV_SOURCE, SPEC_HELP
from ldtm_core.data.universe import load_universe, resolve_tickers
from ldtm_core.errors import InputError

db_app = typer.Typer(help="Database schema.", no_args_is_help=True)
prices_app = typer.Typer(help="Inspect stored prices.", no_args_is_help=True)
ingest_app = typer.Typer(help="Load prices: synthetic market, CSV or Parquet files.", no_args_is_help=True)
app.add_typer(db_app, name="db")
app.add_typer(prices_app, name="prices")
app.add_typer(ingest_app, name="ingest")


@db_app.command("upgrade")
@handle_errors
def db_upgrade(
    dry_run: bool = typer.Option(False, "--dry-run", help="list what would change; change nothing"),
) -> None:
    """Create or migrate every table and view (idempotent), saying what each revision changes."""
    from ldtm_core.db import get_engine
    from ldtm_core.migrate import current_revision, pending, upgrade

    cfg = settings()
    get_engine(cfg.database_url)  # a URL that cannot be opened is one clear error first
    where = masked_url(cfg.database_url)
    if dry_run:
        steps = pending(cfg.database_url) if _exists(cfg) else []
        _say_steps(where, steps, "would apply")
        now = current_revision(cfg.database_url) if _exists(cfg) else None
        if not steps and now is not None:
            console.print(f"database {where} is already at the newest revision ({now}); nothing was changed")
        else:
            console.print(
                f"database {where} at revision {now or '(none: no tables yet)'}; nothing was changed"
            )
        return
    cfg.ensure_dirs()
    cfg.require_writable_sqlite()
    existed = _exists(cfg)

    def announce(steps: list[tuple[str, str]]) -> None:  # under the migration lock: what is really left
        if not existed:
            return
        _say_steps(where, steps, "applying")
        if not steps:
            console.print(f"database {where}: nothing to apply (already at the newest revision)")

    upgrade(cfg.database_url, announce=announce)  # the one entry point that migrates
    console.print(f"database {where} at revision {current_revision(cfg.database_url)}")


def _say_steps(where: str, steps: list[tuple[str, str]], verb: str) -> None:
    if steps:
        console.print(f"database {where}: {verb} {len(steps)} revision(s)")
        for revision, change in steps:
            console.print(f"  {revision}  {change}", highlight=False, soft_wrap=True)


@db_app.command("grant")
@handle_errors
def db_grant(
    app_role: str = typer.Option(..., "--app", help="the application role: reads and writes rows, no DDL"),
    reader_role: str = typer.Option(..., "--reader", help="the read-only role (the dashboard)"),
) -> None:
    """Give the application and reader roles their least privileges (PostgreSQL).

    Run as the owner of the tables after every `ldtm db upgrade`; idempotent. The policy:
    ldtm_core/db_roles.py."""
    from ldtm_core import db_roles
    from ldtm_core.db import get_engine

    cfg = settings()
    engine = get_engine(cfg.database_url)
    db_roles.check_role_name(app_role, "--app")
    db_roles.check_role_name(reader_role, "--reader")
    db_roles.require_postgres(engine)
    db_roles.require_head(cfg.database_url)
    granted = db_roles.grant(engine, app_role, reader_role)
    console.print(f"database {masked_url(cfg.database_url)}, owner {granted.owner}:", highlight=False)
    for line in granted.lines():
        console.print(f"  {line}", highlight=False, soft_wrap=True)


def _exists(cfg) -> bool:
    """Whether the database can be read without creating it (a SQLite file that is not there yet is not)."""
    from sqlalchemy.engine import make_url

    url = make_url(cfg.database_url)
    if url.get_backend_name() != "sqlite" or not url.database or url.database == ":memory:":
        return True
    return Path(url.database).expanduser().is_file()


@prices_app.command("summary")
@handle_errors
def prices_summary() -> None:
    """Rows and first/last date per ticker."""
    from ldtm_core.data.prices import price_summary

    df = price_summary(open_db())
    table = Table(
        "ticker",
        "rows",
        "first",
        "last",
        title=f"prices ({len(df)} tickers, {int(df['rows'].sum()) if len(df) else 0} rows)",
    )
    for row in df.itertuples(index=False):
        table.add_row(row.ticker, str(row.rows), str(row.first_date), str(row.last_date))
    console.print(table)


def _select_tickers(selection: str | None, universe: list[str], allow_new: bool) -> list[str]:
    """`N` = the first N tickers of the universe; a comma list; nothing = the whole universe."""
    if selection is not None and selection.strip().isdigit():
        n = int(selection)
        if not 1 <= n <= len(universe):
            raise InputError(
                f"--tickers {n}: the universe has {len(universe)} tickers (give 1..{len(universe)})"
            )
        return universe[:n]
    return resolve_tickers(selection, universe, allow_new=allow_new)


def _ticker_cell(tickers: list[str]) -> str:
    return ", ".join(tickers) if len(tickers) <= 4 else f"{len(tickers)} ({', '.join(tickers[:3])}, ...)"


def _outcome_table(title: str) -> Table:
    return Table("file", "tickers", "rows", "written", "status", title=title)


@ingest_app.command("synthetic")
@handle_errors
def ingest_synthetic_cmd(
    tickers: str = typer.Option(
        None, "--tickers", "-t", help="N (first N of the universe) or T1,T2; default: the whole universe"
    ),
    start: str = typer.Option(None, help="first date YYYY-MM-DD; default 20 years before --end"),
    end: str = typer.Option(
        None, help="last date YYYY-MM-DD; default the latest XNYS session already closed (New York time)"
    ),
    seed: int = typer.Option(0, help="random seed; the same seed gives the same prices"),
    allow_new: bool = typer.Option(False, "--allow-new", help="accept tickers outside the universe"),
    force: bool = typer.Option(
        False, "--force", help="replace stored history with other prices (e.g. another --seed)"
    ),
) -> None:
    """Generate the deterministic synthetic market and upsert it (idempotent)."""
    from ldtm_core.data.calendar import latest_closed_session
    from ldtm_core.data.ingest import ingest_synthetic

    cfg = settings()
    selected = _select_tickers(tickers, load_universe(cfg.universe), allow_new)
    end_d = parse_date(end, "--end") or latest_closed_session()
    start_d = parse_date(start, "--start") or _years_before(end_d, 20)
    if start_d > end_d:
        raise InputError(f"--start {start_d} is after --end {end_d}")
    engine = open_db(cfg)
    result = ingest_synthetic(engine, selected, start_d, end_d, seed, force=force or None)
    refill_after_ingest(engine, result)
    table = _outcome_table(f"synthetic ingest {start_d}..{end_d} into {masked_url(cfg.database_url)}")
    table.add_row(result.source, _ticker_cell(selected), str(result.rows), str(result.written), "ok")
    console.print(table)
    _warn_gaps(result.gaps)


def _years_before(day: dt.date, years: int) -> dt.date:
    try:
        return day.replace(year=day.year - years)
    except ValueError:  # 29 February
        return day.replace(year=day.year - years, day=28)


def _warn_moves(moves, threshold: float) -> None:
    """The one warning every ingest path gives for a large move no recorded action explains."""
    for move in moves:
        err_console.print(
            f"[bold yellow]warning:[/] one-day move beyond {threshold:g}% not explained by a recorded "
            f"corporate action: {escape(move.describe())}",
            highlight=False,
            soft_wrap=True,
        )


def _warn_gaps(gaps) -> None:
    """The one warning every ingest path gives for a hole in a ticker's bars (price_gaps)."""
    for gap in gaps:
        err_console.print(
            f"[bold yellow]warning:[/] {escape(gap.describe())}", highlight=False, soft_wrap=True
        )


@ingest_app.command("csv")
@handle_errors
def ingest_csv_cmd(
    paths: Annotated[list[Path], typer.Argument(help="CSV/Parquet files or directories of them")],
    allow_new: bool = typer.Option(False, "--allow-new", help="accept tickers outside the universe"),
    force: bool = typer.Option(
        False,
        "--force",
        help="overwrite stored history that a file changes in a way no corporate action explains "
        "(default: that file is refused; also LDTM_FORCE_REINGEST=1)",
    ),
) -> None:
    """Ingest CSV and Parquet price files, one transaction per file.

    One file per ticker (TICKER.csv / TICKER.parquet) or a long file with a ticker column; Yahoo-style
    headers (Date, Open, High, Low, Close, Adj Close, Volume) in any case. A bad file stores nothing and
    is reported; the other files are still stored. Stored history is checked as `ingest fetch` checks it:
    a change no corporate action explains is refused unless --force, and an unexplained one-day move
    beyond LDTM_MAX_DAILY_MOVE_PCT (a split?) is warned about. Exit code 1 if any file failed.
    """
    from ldtm_core.data.ingest import ingest_files
    from ldtm_core.data.price_files import expand_paths
    from ldtm_core.data.price_moves import threshold_from_env
    from ldtm_core.progress import progress

    cfg = settings()
    threshold = threshold_from_env()
    files = expand_paths(paths)
    engine = open_db(cfg)
    with progress("ingest", len(files)) as advance:
        outcomes = ingest_files(
            engine,
            files,
            load_universe(cfg.universe),
            allow_new=allow_new,
            on_outcome=lambda o: advance(f"{Path(o.path).name} {'ok' if o.ok else 'failed'}"),
            force=force or None,  # None: LDTM_FORCE_REINGEST decides
            threshold_pct=threshold,
        )
    refill_after_ingest(engine, *outcomes)
    failed = [o for o in outcomes if not o.ok]
    table = _outcome_table(f"file ingest into {masked_url(cfg.database_url)}")
    for o in outcomes:
        status = "ok" if o.ok else f"[red]failed[/]: {escape(o.error or '')}"
        table.add_row(escape(o.path), _ticker_cell(o.tickers), str(o.rows), str(o.written), status)
    console.print(table)
    _warn_moves([m for o in outcomes for m in o.moves], threshold)
    _warn_gaps([g for o in outcomes for g in o.gaps])
    for o in failed:
        err_console.print(f"[bold red]error:[/] {escape(o.error or '')}", highlight=False, soft_wrap=True)
    if failed:
        err_console.print(f"{len(failed)} of {len(outcomes)} file(s) failed; nothing was stored from them")
        raise typer.Exit(1)


@ingest_app.command("fetch")
@handle_errors
def ingest_fetch_cmd(
    tickers: str = typer.Option(
        None, "--tickers", "-t", help="N (first N of the universe) or T1,T2; default: the whole universe"
    ),
    start: str = typer.Option(
        None, help="first date for a ticker with no stored prices (YYYY-MM-DD); default 20 years before --end"
    ),
    end: str = typer.Option(
        None, help="last date YYYY-MM-DD; default the latest XNYS session already closed (New York time)"
    ),
    source: str = typer.Option(None, "--source", "-s", help=f"{SPEC_HELP}; default ${ENV_SOURCE}"),
    overlap: int = typer.Option(5, help="sessions re-fetched before each ticker's last stored date"),
    refetch: bool = typer.Option(False, "--refetch", help="fetch every ticker from --start"),
    seed: int = typer.Option(0, help="synthetic source: random seed"),
    allow_new: bool = typer.Option(False, "--allow-new", help="accept tickers outside the universe"),
    force: bool = typer.Option(
        False,
        "--force",
        help="overwrite stored history that the source changed in a way no corporate action explains "
        "(default: such a ticker is refused; also LDTM_FORCE_REINGEST=1)",
    ),
) -> None:
    """Fetch prices from the configured source, incrementally, and store every ticker that passes
    validation. Each ticker's outcome is listed; exit code 1 if any ticker failed."""
    from ldtm_core.data.calendar import latest_closed_session
    from ldtm_core.data.price_fetch import fetch_prices
    from ldtm_core.data.price_moves import threshold_from_env
    from ldtm_core.data.sources import configured_spec, make_source

    cfg = settings()
    universe = load_universe(cfg.universe)
    selected = _select_tickers(tickers, universe, allow_new)
    end_d = parse_date(end, "--end") or latest_closed_session()
    start_d = parse_date(start, "--start") or _years_before(end_d, 20)
    if start_d > end_d:
        raise InputError(f"--start {start_d} is after --end {end_d}")
    threshold = threshold_from_env()
    source_obj = make_source(configured_spec(source), seed=seed)
    engine = open_db(cfg)
    report = fetch_prices(
        engine,
        source_obj,
        selected,
        first_start=start_d,
        end=end_d,
        overlap=overlap,
        universe=universe,
        allow_new=allow_new,
        refetch=refetch,
        force=force or None,  # None: LDTM_FORCE_REINGEST decides
    )
    refill_after_ingest(engine, report)
    table = Table(
        "ticker",
        "status",
        "from",
        "rows",
        "written",
        "last",
        "reason",
        title=f"fetch from {escape(report.source)} up to {end_d} into {masked_url(cfg.database_url)}",
    )
    for row in report.table():
        status = row["status"] if row["status"] != "failed" else "[red]failed[/]"
        table.add_row(
            row["ticker"],
            status,
            row["from"],
            str(row["rows"]),
            str(row["written"]),
            row["last"],
            escape(row["reason"]),
        )
    console.print(table)
    for f in report.files:
        err = f" ({escape(f['error'])})" if f["error"] else ""
        console.print(f"file {escape(f['file'])}: {f['status']}, {f['rows']} rows{err}")
    for o in report.outcomes.values():
        for action in o.actions:
            console.print(f"corporate action recorded: {escape(action)}")
    _warn_moves(report.moves, threshold)
    _warn_gaps(report.gaps)
    if report.failed:
        err_console.print(
            f"{len(report.failed)} of {len(report.outcomes)} ticker(s) failed; nothing was stored for them"
        )
    if report.rejected_files:
        err_console.print(f"{len(report.rejected_files)} file(s) rejected; nothing was stored from them")
    if report.failed or report.rejected_files:
        raise typer.Exit(1)
