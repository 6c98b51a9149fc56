"""Commands for data: db upgrade, universe, ingest, prices summary."""

from __future__ import annotations

import typer
from rich.table import Table

from ..config import masked_url
from ..universe import load_universe
from . import app, console, handle_errors, open_db, settings

db_app = typer.Typer(help="Database schema.", no_args_is_help=True)
prices_app = typer.Typer(help="Inspect stored prices.", no_args_is_help=True)
app.add_typer(db_app, name="db")
app.add_typer(prices_app, name="prices")


@db_app.command("upgrade")
@handle_errors
def db_upgrade() -> None:
    """Create or migrate every table and view (idempotent)."""
    from ..migrate import current_revision

    cfg = settings()
    open_db(cfg)
    console.print(f"database {masked_url(cfg.database_url)} at revision {current_revision(cfg.database_url)}")


@app.command("universe")
@handle_errors
def universe(
    spec: str = typer.Option(
        None, "--universe", "-u", help="demo, full, a comma list or a file; default LDTM_UNIVERSE"
    ),
) -> None:
    """List the tickers of the configured universe."""
    tickers = load_universe(spec or settings().universe)
    console.print(f"{len(tickers)} tickers: " + " ".join(tickers))


@prices_app.command("summary")
@handle_errors
def prices_summary() -> None:
    """Rows and first/last date per ticker."""
    from ..prices import price_summary

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
