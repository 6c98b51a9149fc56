"""Commands for the stored features: build (fingerprinted, incremental) and show."""

from __future__ import annotations

import time

import typer
from rich.markup import escape
from rich.table import Table

from ldtm_core.cli.common import app, console, err_console, handle_errors, open_db, parse_date, settings
from ldtm_core.cli.data import _select_tickers
from ldtm_core.config import masked_url
from ldtm_core.data.universe import load_universe, validate_ticker
from ldtm_core.errors import InputError, NotFoundError

features_app = typer.Typer(
    help="The feature registry and the stored features (the reference recipe's, per ticker and session).",
    no_args_is_help=True,
)
app.add_typer(features_app, name="features")

SHOW_DEFAULT_ROWS = 20


@features_app.command("list")
@handle_errors
def features_list() -> None:
    """The registered features (any of them can be a model's: `--set features=A,B,...`), their warm-up,
    and whether the store holds them (the reference recipe's) or readers compute them from prices."""
    from ldtm_core.data.features import FEATURES
    from ldtm_core.schema import FEATURE_COLUMNS

    table = Table("feature", "warm-up sessions", "source", title="registered features")
    for name, feature in FEATURES.items():
        source = "stored (reference recipe)" if name in FEATURE_COLUMNS else "computed from prices on read"
        table.add_row(name, str(feature.warmup), source)
    console.print(table)


@features_app.command("build")
@handle_errors
def features_build(
    tickers: str = typer.Option(
        None, "--tickers", "-t", help="N (first N of the universe) or T1,T2; default: the whole universe"
    ),
    force: bool = typer.Option(False, "--force", help="rewrite every set, even those still current"),
    allow_new: bool = typer.Option(False, "--allow-new", help="accept tickers outside the universe"),
) -> None:
    """Compute and store features, and the `price_features` library the tabular recipes read, with the
    fingerprint of their prices.

    A ticker whose prices did not change is left alone, one with only new sessions gets just those rows,
    anything else is rebuilt.
    """
    from ldtm_core.data.feature_store import build_features

    cfg = settings()
    selected = _select_tickers(tickers, load_universe(cfg.universe), allow_new=allow_new)
    t0 = time.perf_counter()
    outcomes = build_features(open_db(cfg), selected, force=force)
    wall = time.perf_counter() - t0
    table = Table(
        "ticker", "status", "rows", "written", "first", "last", "fingerprint", "price features", "reason"
    )
    table.title = f"features in {masked_url(cfg.database_url)} ({wall:.2f} s)"
    for o in outcomes:
        table.add_row(
            o.ticker,
            o.status,
            str(o.rows),
            str(o.rows_written),
            str(o.first_date or ""),
            str(o.last_date or ""),
            o.fingerprint.bars_sha256[:12] if o.fingerprint else "",
            f"{o.library} ({o.library_rows_written} written)" if o.library else "",
            escape("; ".join(filter(None, [o.reason, o.library == "refused" and o.library_reason]))),
        )
    console.print(table)


def _no_features_hint(engine, ticker: str) -> str:
    """Why `ticker` has no stored features, with the next command that will work (not one that fails)."""
    from ldtm_core.data.prices import latest_price_date

    new = " --allow-new" if ticker not in load_universe(settings().universe) else ""
    if latest_price_date(engine, [ticker]) is None:
        return (
            f"no stored features for {ticker}: {ticker} has no prices either; load them first "
            f"(`ldtm ingest csv FILE{new}`, or `ldtm ingest fetch --tickers {ticker}{new}`), then build its "
            f"features (`ldtm features build --tickers {ticker}{new}`)"
        )
    return f"no stored features for {ticker}: run `ldtm features build --tickers {ticker}{new}`"


@features_app.command("show")
@handle_errors
def features_show(
    ticker: str = typer.Argument(..., help="the ticker"),
    start: str = typer.Option(None, help="first date YYYY-MM-DD"),
    end: str = typer.Option(None, help="last date YYYY-MM-DD"),
) -> None:
    """Stored feature rows of one ticker (the last 20 without --start/--end) and whether they are current."""
    from ldtm_core.data.feature_store import current_fingerprint, read_stored, stale_reason, stored_sets
    from ldtm_core.data.prices import load_ticker_prices

    ticker = validate_ticker(ticker)
    start_d, end_d = parse_date(start, "--start"), parse_date(end, "--end")
    if start_d and end_d and start_d > end_d:
        raise InputError(f"--start {start_d} is after --end {end_d}")
    engine = open_db()
    stored = stored_sets(engine, [ticker]).get(ticker)
    if stored is None:
        raise NotFoundError(_no_features_hint(engine, ticker))
    frame = read_stored(engine, ticker, start=start_d, end=end_d)
    if start_d is None and end_d is None:
        frame = frame.tail(SHOW_DEFAULT_ROWS)
    reason = stale_reason(stored, current_fingerprint(engine, ticker, load_ticker_prices(engine, ticker)))
    table = Table("date", *frame.columns, title=f"{ticker} features ({len(frame)} of {stored.rows} rows)")
    for day, row in frame.iterrows():
        table.add_row(str(day), *(f"{v:.6g}" for v in row.to_numpy()))
    console.print(table)
    console.print(
        f"built {stored.built_at:%Y-%m-%d %H:%M} from {stored.fingerprint.short}; "
        f"{stored.warmup_rows} warm-up rows not stored"
    )
    if reason:
        err_console.print(
            f"[bold yellow]stale:[/] {escape(reason)}; readers recompute from prices until "
            f"`ldtm features build --tickers {ticker}` runs",
            highlight=False,
            soft_wrap=True,
        )
    else:
        console.print("current: the fingerprint matches the prices")
