"""Commands for models: train, export onnx (the machine's capacity, `gpu` and `bench`, is in hardware.py)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from ldtm_core.cli.common import (
    app,
    console,
    err_console,
    handle_errors,
    open_db,
    parse_date,
    print_outcomes,
    settings,
)
from ldtm_core.errors import InputError, NotFoundError
from ldtm_core.learning.recipes import RECIPES

export_app = typer.Typer(help="Export models.", no_args_is_help=True)
app.add_typer(export_app, name="export")


def _fmt(value: float | None, spec: str) -> str:
    return "" if value is None else format(value, spec)


@app.command("train")
@handle_errors
def train(
    tickers: str = typer.Option(
        ..., "--tickers", "-t", help="comma list of tickers, or 'all' for the universe"
    ),
    profile: str = typer.Option(
        "reference",
        "--profile",
        "-p",
        help="the LSTM's profile: demo | reference | reference_b32 | upgrade | tuned (per ticker, from `ldtm tune`)",
    ),
    overrides: Annotated[
        list[str] | None, typer.Option("--set", help="override a model config field: key=value")
    ] = None,
    as_of: str = typer.Option(None, "--as-of", help="train on prices up to this date (YYYY-MM-DD)"),
    workers: int = typer.Option(
        None, "--workers", "-w", min=1, help="parallel workers (default: the slot plan)"
    ),
    allow_new: bool = typer.Option(False, "--allow-new", help="accept tickers outside the universe"),
    warm_start: bool = typer.Option(
        None,
        "--warm-start/--cold-start",
        help="fine-tune each ticker's active model when its architecture matches (default: cold, see docs/performance.md)",
    ),
    recipe: str = typer.Option(
        "lstm",
        "--recipe",
        "-r",
        help=f"{' | '.join(RECIPES)}: lstm fits a network per ticker, the others once for all the tickers "
        "(docs/architecture.md)",
    ),
) -> None:
    """Train, checkpoint and register a candidate model per ticker: the LSTM, one network per ticker, or
    with --recipe a global recipe fitted once for all the tickers (--set: the recipe's own fields)."""
    from ldtm_core.data.universe import load_universe, resolve_tickers
    from ldtm_core.learning import recipes
    from ldtm_core.learning.training import parse_overrides

    cfg_settings = settings()
    chosen_recipe = recipes.get(recipe)  # refuse a bad recipe, profile or override before anything else
    if chosen_recipe.name == recipes.LSTM:
        from ldtm_core.learning.tuning_store import check_profile

        parsed = parse_overrides(overrides)
        check_profile(profile, parsed)
    else:
        from ldtm_core.learning.recipes.family import family
        from ldtm_core.learning.recipes.global_fit import recipe_config

        for name, given in (("--profile", profile != "reference"), ("--warm-start", warm_start)):
            if given:
                raise InputError(f"{name} applies to the {recipes.LSTM} recipe, not to {recipe}")
        parsed = parse_overrides(overrides, family(recipe).config)
        recipe_config(recipe, parsed)
        profile = recipe
    when = parse_date(as_of, "--as-of")
    universe = load_universe(cfg_settings.universe)
    selection = None if tickers.strip().lower() == "all" else tickers
    chosen = resolve_tickers(selection, universe, allow_new=allow_new)
    engine = open_db(cfg_settings)
    cfg_settings.require_writable(cfg_settings.checkpoint_dir, "the trained checkpoints")
    from ldtm_core.learning.warm_start import DEFAULT_WARM_START
    from ldtm_core.progress import progress

    if chosen_recipe.scope == "global":
        from ldtm_core.learning.recipes.global_fit import train_global

        with progress(f"train {recipe}", 1) as advance:
            outcomes = train_global(engine, cfg_settings, recipe, chosen, as_of=when, overrides=parsed)
            advance(f"{recipe} fitted")
    else:
        from ldtm_core.learning.training_pool import train_many

        with progress("train", len(chosen)) as advance:
            outcomes = train_many(
                cfg_settings,
                chosen,
                profile,
                overrides=parsed,
                as_of=when,
                max_workers=workers,
                warm_start=DEFAULT_WARM_START if warm_start is None else warm_start,
                on_outcome=lambda o: advance(f"{o.ticker} {o.status}"),
            )

    one_fit = chosen_recipe.scope == "global"  # its settings and time are the one fit's, said below
    counts = print_outcomes(
        f"train ({profile})",
        ("ticker", "settings", "device", "duration", "epochs", "status", "val_loss", "reason"),
        outcomes,
        lambda o, status: (
            o.ticker,
            "" if one_fit else o.profile or "",
            o.device or "",
            "" if one_fit else f"{o.duration_s:.1f}s",
            "" if o.epochs is None else str(o.epochs),
            status,
            _fmt(o.val_loss, ".5f"),
            o.reason,
        ),
        {"trained": "green", "skipped": "yellow", "failed": "red"},
    )
    console.print()
    if one_fit:
        _print_fit(engine, recipe, parsed, outcomes)
    if not counts["trained"]:
        err_console.print("[bold red]error:[/] nothing was trained", highlight=False)
    if counts["failed"] or not counts["trained"]:
        sys.exit(1)


def _print_fit(engine, recipe: str, overrides: dict, outcomes) -> None:
    """A global recipe's one fit: its settings, time and pool (the tickers whose rows it fitted)."""
    from ldtm_core.learning.recipes.global_fit import fit_pool

    trained = next((o for o in outcomes if o.model_id is not None), None)
    settings_said = ", ".join(f"{k}={v}" for k, v in overrides.items()) or "its defaults"
    if trained is None:
        console.print(f"{recipe} ({settings_said}): no fit registered", highlight=False)
        return
    pool = fit_pool(engine, trained.model_id) or []
    console.print(
        f"{recipe} ({settings_said}): one fit in {trained.duration_s:.1f}s on the rows of {len(pool)} "
        f"ticker(s), the member universe (LDTM_UNIVERSE) and those asked for: {', '.join(pool)}",
        highlight=False,
        soft_wrap=True,
    )


def _model_checkpoint(engine, ticker: str, candidate: bool) -> tuple[str, str, int]:
    """(path, sha256, model id) of the active model for `ticker`; with `candidate`, of its newest
    candidate. A ticker whose only model is a candidate is refused without `candidate`: a model that
    has not passed the gate is never exported by accident."""
    from sqlalchemy import select

    from ldtm_core.schema import model_registry as mr

    def newest(status: str):
        with engine.connect() as conn:
            return conn.execute(
                select(mr.c.id, mr.c.checkpoint_path, mr.c.checkpoint_sha256)
                .where(mr.c.ticker == ticker, mr.c.status == status)
                .order_by(mr.c.created_at.desc(), mr.c.id.desc())
                .limit(1)
            ).first()

    row = newest("candidate" if candidate else "active")
    if row is not None:
        from ldtm_core.learning.registry import get_model

        if (recipe := get_model(engine, row.id).recipe) != "lstm":
            raise InputError(
                f"model {row.id} of {ticker} is a {recipe} recipe: ONNX export is for the lstm recipe; a "
                f"{recipe} model is already portable: JSON data, sha256-verified ({row.checkpoint_path}; "
                "docs/architecture.md, Add a recipe)"
            )
        return row.checkpoint_path, row.checkpoint_sha256, row.id
    if candidate:
        raise NotFoundError(f"no candidate model registered for ticker {ticker}; run `ldtm train` first")
    cand = newest("candidate")
    if cand is not None:
        raise InputError(
            f"{ticker} has no active model, only candidate model {cand.id}, which has not passed the gate; "
            "pass --candidate to export it anyway"
        )
    raise NotFoundError(
        f"no active or candidate model registered for ticker {ticker}; run `ldtm train` first"
    )


@export_app.command("onnx")
@handle_errors
def export_onnx_cmd(
    ticker: str = typer.Option(..., "--ticker", "-t"),
    checkpoint: Annotated[
        Path | None, typer.Option("--checkpoint", help="a checkpoint file (default: the registry's model)")
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option(
            "--out", help="output .onnx path; its folder must exist (default: LDTM_HOME/exports/...)"
        ),
    ] = None,
    opset: int = typer.Option(17, "--opset"),
    candidate: bool = typer.Option(
        False,
        "--candidate",
        help="export the newest candidate (not yet through the gate) instead of the active model",
    ),
) -> None:
    """Export a model (the active one by default) to ONNX and verify it against PyTorch."""
    from ldtm_core.data.universe import validate_ticker
    from ldtm_core.learning.checkpoints import load_checkpoint
    from ldtm_core.learning.export import export_onnx

    ticker = validate_ticker(ticker)
    cfg = settings()
    if out is not None:
        _require_output_folder(out)
    model_id = None
    if checkpoint is None:
        path, sha, model_id = _model_checkpoint(open_db(cfg), ticker, candidate)
        ckpt = load_checkpoint(path, expected_sha256=sha, ticker=ticker)
    else:
        ckpt = load_checkpoint(checkpoint, ticker=ticker)
    if out is None:
        cfg.ensure_dirs()  # the default folder is ours to create
    target = out or cfg.export_dir / f"{Path(ckpt.path).stem}.onnx"
    result = export_onnx(ckpt, target, opset=opset)
    console.print(
        f"wrote {result.path} (opset {result.opset}, dynamic batch, max |onnx - torch| = {result.max_abs_diff:.2e})"
    )
    if candidate and model_id is not None:
        err_console.print(f"[yellow]exported candidate model {model_id}: it has not passed the gate[/]")


def _require_output_folder(out: Path) -> None:
    """Like cp or tar: the folder of --out must exist; a typo must not create a directory tree."""
    if out.is_dir():
        raise InputError(f"--out {out} is a directory; give a file name such as {out / 'model.onnx'}")
    if not out.parent.is_dir():
        raise InputError(f"--out {out}: the folder {out.parent} does not exist")
