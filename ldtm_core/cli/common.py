"""What every command module of `ldtm` shares: the Typer `app` they register on, the consoles, the
settings and database opener, formatting, and the error handler. (`cli/__init__.py` imports the command
modules, which import this, so nothing here imports them back.)"""

from __future__ import annotations

import datetime as dt
import math
import os
import sys
from collections.abc import Callable, Sequence
from functools import wraps

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from sqlalchemy.exc import SQLAlchemyError

from ldtm_core.config import Settings, mask_secrets, masked_url
from ldtm_core.errors import InputError, LDTMError

app = typer.Typer(
    help="LDTM: forecasts of any recipe (the per-ticker LSTM, global recipes, your own), recorded before "
    "the answer is known, filled back, scored against baselines and gated.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
# Piped output (CI logs, `make demo | tee`) would otherwise be cut to 80 columns and squeeze tables.
console = Console(width=None if sys.stdout.isatty() or "COLUMNS" in os.environ else 160)
err_console = Console(stderr=True)


def settings() -> Settings:
    return Settings.from_env()


def open_db(cfg: Settings | None = None):
    """The engine for the configured database, as it is: an empty one is created at the newest revision,
    one behind it is refused with one line naming `ldtm db upgrade`, the only command that migrates."""
    from ldtm_core.migrate import open_database

    cfg = cfg or settings()
    cfg.ensure_dirs()
    cfg.require_writable_sqlite()
    return open_database(cfg.database_url)


def parse_date(value: str | None, option: str) -> dt.date | None:
    """A YYYY-MM-DD option value, or None when not given; anything else is a clean InputError."""
    if value is None:
        return None
    try:
        return dt.date.fromisoformat(value.strip())
    except ValueError:
        raise InputError(f"{option}: {value!r} is not a date (expected YYYY-MM-DD)") from None


def fmt_pct(v) -> str:
    return "—" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v * 100:.1f}%"


def fmt_num(v, digits=2) -> str:
    return "—" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.{digits}f}"


def print_outcomes(
    title: str,
    columns: Sequence[str],
    outcomes: Sequence,
    cells: Callable[[object, str], Sequence[str]],
    colours: dict[str, str],
) -> dict[str, int]:
    """One row per ticker outcome of a many-ticker command (`cells(outcome, coloured status)`), then
    the count per status (in `colours`' order), printed and returned."""
    table = Table(*columns, title=title)
    for o in outcomes:
        table.add_row(*cells(o, f"[{colours[o.status]}]{o.status}[/]"))
    console.print(table)
    counts = {s: sum(o.status == s for o in outcomes) for s in colours}
    console.print(", ".join(f"{n} {s}" for s, n in counts.items()), end="")
    return counts


def _command_path(callback: Callable) -> str:
    """`ldtm group command` of a registered callback (for messages), from the Typer registrations."""

    def search(typer_app: typer.Typer, prefix: list[str]) -> list[str] | None:
        for cmd in typer_app.registered_commands:
            if cmd.callback is callback:
                return [*prefix, cmd.name or callback.__name__]
        for group in typer_app.registered_groups:
            found = search(group.typer_instance, [*prefix, group.name or ""])
            if found:
                return found
        return None

    return " ".join(search(app, ["ldtm"]) or ["ldtm"])


def handle_errors(fn: Callable) -> Callable:
    """Report LDTM errors as one clean line on stderr with exit code 2, not as a traceback; Ctrl-C as
    one line saying what was kept, with the shell's exit code for SIGINT (130)."""

    @wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except KeyboardInterrupt:
            err_console.print(
                f"[bold yellow]interrupted:[/] `{_command_path(wrapper)}` stopped by Ctrl-C. Everything it committed "
                "before is kept (each file, ticker, model or evening is written in one transaction, all or "
                "none); the one in progress was not recorded. Run it again to go on.",
                highlight=False,
                soft_wrap=True,
            )
            sys.exit(130)
        except LDTMError as exc:
            # escape: messages quote user data such as "[low 9, high 11]", which is not rich markup.
            err_console.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False, soft_wrap=True)
            sys.exit(2)
        except SQLAlchemyError as exc:  # e.g. the server is unreachable while migrating: no traceback
            url = settings().database_url
            orig = getattr(exc, "orig", None) or exc
            detail = mask_secrets(str(orig), url).strip().splitlines() or [type(exc).__name__]
            message = f"database {masked_url(url)} failed: {detail[0]}"
            err_console.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)
            sys.exit(2)

    return wrapper
