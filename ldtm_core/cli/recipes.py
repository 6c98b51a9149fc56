"""`ldtm recipes list`: every recipe LDTM can train, where each comes from, and the plugins it refused."""

from __future__ import annotations

import typer
from rich.markup import escape
from rich.table import Table

from ldtm_core.cli.common import app, console, handle_errors

recipes_app = typer.Typer(
    help="The recipes: built in, or from an installed package (docs/bring-your-own-model.md).",
    no_args_is_help=True,
)
app.add_typer(recipes_app, name="recipes")


@recipes_app.command("list")
@handle_errors
def recipes_list() -> None:
    """Every recipe (`ldtm train --recipe NAME`): its scope, its source (ldtm, or the package and version
    that registers it under the `ldtm.recipes` entry point group) and what it is; then the plugins refused,
    each with why."""
    from ldtm_core.learning.recipes import RECIPES, plugins

    table = Table("recipe", "scope", "source", "what it is", title="recipes")
    for r in RECIPES.values():
        table.add_row(r.name, r.scope, escape(r.source), escape(r.doc))
    console.print(table)
    refused = plugins.refused()
    if not refused:
        console.print("no recipe plugin refused", highlight=False)
        return
    table = Table("plugin", "why it is refused", title="recipe plugins refused")
    for name, why in refused.items():
        table.add_row(escape(name), f"[red]{escape(why)}[/]")
    console.print(table)
