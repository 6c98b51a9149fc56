"""`ldtm tune`: hyper-parameter search per ticker (or shared), and `ldtm tune show TICKER`."""

from __future__ import annotations

import logging
import re
from typing import Annotated

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from ldtm_core.cli.common import app, console, handle_errors, open_db, settings
from ldtm_core.errors import InputError

tune_app = typer.Typer(
    help="Hyper-parameter search with Optuna; studies live in the application database.",
    invoke_without_command=True,
)
app.add_typer(tune_app, name="tune")


@tune_app.callback()
@handle_errors
def tune_cmd(
    ctx: typer.Context,
    tickers: str = typer.Option(None, "--tickers", "-t", help="comma list of tickers, or 'all'"),
    trials: int = typer.Option(None, "--trials", "-n", min=1, help="trials to run in this process"),
    timeout: float = typer.Option(None, "--timeout", min=1, help="stop starting trials after S seconds"),
    overrides: Annotated[
        list[str] | None, typer.Option("--set", help="fix a model config field for every trial: key=value")
    ] = None,
    shared: bool = typer.Option(False, "--shared", help="one study for all tickers (settings shared by all)"),
    seed: int = typer.Option(0, "--seed", help="sampler seed: the same seed proposes the same trials"),
    base: str = typer.Option("reference", "--base-profile", help="profile for the fields not searched"),
    threads: int = typer.Option(1, "--threads", min=1, help="torch threads in this process"),
    allow_new: bool = typer.Option(False, "--allow-new", help="accept tickers outside the universe"),
) -> None:
    """Search settings per ticker (a study each) or, with --shared, one study over all of them."""
    if ctx.invoked_subcommand is not None:
        return
    if not tickers:
        raise InputError("name the tickers to tune: --tickers AAPL,MSFT (or 'all')")
    if trials is None and timeout is None:
        raise InputError("give --trials N, --timeout S, or both")
    import optuna

    from ldtm_core.data.universe import load_universe, resolve_tickers
    from ldtm_core.learning.model import get_profile
    from ldtm_core.learning.training import parse_overrides

    cfg_settings = settings()
    fixed = parse_overrides(overrides)
    get_profile(base, **fixed)  # refuse a bad profile/override before any work
    universe = load_universe(cfg_settings.universe)
    chosen = resolve_tickers(None if tickers.strip().lower() == "all" else tickers, universe, allow_new)
    engine = open_db(cfg_settings)
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # the progress bar reports each trial
    groups = [chosen] if shared else [[t] for t in chosen]

    results = []
    interrupted = _InterruptedTrial()
    # On the handlers: records of Optuna's child loggers pass their parent's handlers, not its filters.
    handlers = optuna.logging.get_logger("optuna").handlers
    for handler in handlers:
        handler.addFilter(interrupted)
    try:
        _search(groups, trials, timeout, fixed, base, seed, threads, cfg_settings, engine, results)
    except KeyboardInterrupt:
        # Optuna records the trial that Ctrl-C stopped as FAIL before re-raising: say so, not "not recorded".
        which = f"trial #{interrupted.number}" if interrupted.number is not None else "the trial in progress"
        from ldtm_core.cli.common import err_console

        err_console.print(
            f"[bold yellow]interrupted:[/] `ldtm tune` stopped by Ctrl-C. The trials finished before are kept "
            f"in their study; {which} is recorded as FAIL (Optuna keeps every trial it started) and no best "
            "setting changed. Run it again to add trials.",
            highlight=False,
            soft_wrap=True,
        )
        raise SystemExit(130) from None
    finally:
        for handler in handlers:
            handler.removeFilter(interrupted)
    _print_results(results)


class _InterruptedTrial(logging.Filter):
    """Drops Optuna's warning (with its traceback) for a trial stopped by Ctrl-C, keeping its number."""

    number: int | None = None

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if "KeyboardInterrupt" not in message and not (
            record.exc_info and record.exc_info[0] is KeyboardInterrupt
        ):
            return True
        found = re.match(r"Trial (\d+) failed", message)
        self.number = int(found.group(1)) if found else self.number
        return False


def _search(groups, trials, timeout, fixed, base, seed, threads, cfg_settings, engine, results) -> None:
    from ldtm_core.learning.tuning import tune

    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.fields[status]}"),
        console=console,
    ) as progress:
        for group in groups:
            label = "+".join(group)
            task = progress.add_task(label, total=trials, status="")
            counts = {"pruned": 0, "failed": 0}

            def advance(study, trial, task=task, counts=counts) -> None:
                state = trial.state.name.lower()
                if state == "pruned":
                    counts["pruned"] += 1
                elif state == "fail":
                    counts["failed"] += 1
                try:
                    best = f"best {study.best_value:.4g} (#{study.best_trial.number})"
                except ValueError:  # no finished trial yet
                    best = "no finished trial yet"
                progress.update(
                    task, advance=1, status=f"{best}, {counts['pruned']} pruned, {counts['failed']} failed"
                )

            results.append(
                tune(
                    cfg_settings,
                    group,
                    trials,
                    timeout=timeout,
                    fixed=fixed,
                    base_profile=base,
                    seed=seed,
                    threads=threads,
                    callbacks=[advance],
                    engine=engine,
                )
            )


def _print_results(results) -> None:
    table = Table(
        "study",
        "ran here",
        "trials",
        "pruned",
        "failed",
        "best value",
        "best trial",
        "hold-out before",
        title="tune",
    )
    for r in results:
        table.add_row(
            r.study_name,
            str(r.ran),
            str(r.n_trials),
            str(r.n_pruned),
            str(r.n_failed),
            "" if r.best_value is None else f"{r.best_value:.4f}",
            "" if r.best_number is None else f"#{r.best_number}",
            ", ".join(f"{t} {d}" for t, d in r.holdout.items()),
        )
    console.print(table)
    console.print(
        "objective: validation error in price terms (mean squared % error over the horizons); "
        "`ldtm train --profile tuned` trains each ticker with its study's best settings"
    )


@tune_app.command("show")
@handle_errors
def show_cmd(
    ticker: str = typer.Argument(..., help="a ticker (its own study, else a shared one) or a study name"),
) -> None:
    """The best trial of a ticker's study, its settings, and each parameter's importance."""
    from ldtm_core.learning.tuning import importances, summarise
    from ldtm_core.learning.tuning_store import ATTR_BASE, ATTR_FIXED, load_study

    cfg_settings = settings()
    open_db(cfg_settings)
    study = load_study(cfg_settings.database_url, ticker)
    r = summarise(study)
    console.print(
        f"study {r.study_name} over {', '.join(r.tickers)}: {r.n_trials} trials "
        f"({r.n_complete} complete, {r.n_pruned} pruned, {r.n_failed} failed); every trial's data ends before "
        + ", ".join(f"{t} {d}" for t, d in r.holdout.items())
        + f"; base profile {study.user_attrs.get(ATTR_BASE)}, fixed {study.user_attrs.get(ATTR_FIXED) or 'nothing'}"
    )
    if r.best_number is None:
        console.print("no finished trial yet")
        return
    best = Table(
        "parameter", "best value", "importance", title=f"best trial #{r.best_number}: {r.best_value:.5f}"
    )
    weights = importances(study)
    for name, value in r.best_params.items():
        shown = f"{value:.3g}" if isinstance(value, float) else str(value)
        best.add_row(name, shown, "" if name not in weights else f"{weights[name]:.3f}")
    console.print(best)
    if not weights:
        console.print("importances need at least two finished trials")
