"""`ldtm backtest`: one ticker's walk-forward backtest with every fold shown, or many tickers' newest
candidates on the worker pool, one summary row each."""

from __future__ import annotations

import sys

import typer
from rich.table import Table

from ldtm_core.cli.common import (
    app,
    console,
    err_console,
    fmt_num,
    fmt_pct,
    handle_errors,
    open_db,
    parse_date,
    print_outcomes,
    settings,
)
from ldtm_core.errors import InputError


@app.command("backtest")
@handle_errors
def backtest_cmd(
    ticker: str = typer.Option(None, "--ticker", help="Ticker to backtest (every fold shown)"),
    tickers: str = typer.Option(
        None,
        "--tickers",
        "-t",
        help="comma list or 'all': each ticker's newest candidate, within the slot plan, one row each",
    ),
    workers: int = typer.Option(
        None, "--workers", "-w", min=1, help="with --tickers: parallel workers (default: the slot plan)"
    ),
    folds: int = typer.Option(3, "--folds", help="Walk-forward folds"),
    profile: str = typer.Option(
        None,
        "--profile",
        help="Model profile (default: the candidate's own config; the gate accepts only a backtest of "
        "the candidate's own config)",
    ),
    model_id: int = typer.Option(
        None, "--model-id", help="Candidate the backtest validates (default newest)"
    ),
    recipe: str = typer.Option(
        None,
        "--recipe",
        "-r",
        help="backtest the newest candidate of this recipe (default: the newest candidate, whatever its recipe)",
    ),
    test_sessions: int = typer.Option(
        None,
        "--test-sessions",
        help="Sessions per test fold: the first N of its quarter (default the whole quarter)",
    ),
    warm_start: bool = typer.Option(
        None,
        "--warm-start/--cold-start",
        help="start fold k+1 from fold k's weights (fold 1 is always cold; default: cold, see docs/performance.md)",
    ),
    no_reuse: bool = typer.Option(
        False,
        "--no-reuse",
        help="refit every fold even where a stored outcome has the same key (default: reuse; LDTM_BACKTEST_REUSE=0)",
    ),
    end: str = typer.Option(
        None,
        "--end",
        help="read prices up to this day only (YYYY-MM-DD): the folds stop before it, so a replay "
        "(`ldtm predict --start`) after it is out of fold",
    ),
) -> None:
    """Walk-forward backtest with the purge; writes backtest_folds rows."""
    from ldtm_core.data.universe import validate_ticker
    from ldtm_core.learning.backtest import DEFAULT_WARM_START, run_backtest
    from ldtm_core.learning.model import get_profile
    from ldtm_core.scoring.skill import format_p_value

    if (ticker is None) == (tickers is None):
        raise InputError("give exactly one of --ticker T (one backtest, every fold) or --tickers T1,T2|all")
    warm = DEFAULT_WARM_START if warm_start is None else warm_start
    end_d = parse_date(end, "--end")
    if recipe is not None:
        from ldtm_core.learning.recipes import get

        get(recipe)  # an unknown recipe is refused naming the known ones
        if profile or model_id is not None:
            raise InputError("--recipe chooses the candidate: not with --profile or --model-id")
    if tickers is not None:
        if profile or model_id is not None or test_sessions is not None:
            raise InputError("--profile, --model-id and --test-sessions go with --ticker, not --tickers")
        _backtest_many(tickers, folds, workers, warm, False if no_reuse else None, end_d, recipe)
        return
    cfg = settings()
    if recipe is not None:
        from ldtm_core.errors import NotFoundError
        from ldtm_core.learning.registry import newest_candidate

        found = newest_candidate(open_db(cfg), validate_ticker(ticker), recipe)
        if found is None:
            raise NotFoundError(
                f"{ticker} has no candidate of recipe {recipe}; `ldtm train --recipe {recipe}` first"
            )
        model_id = found.id
    options = {"warm_start": warm, "reuse": False if no_reuse else None, "end": end_d}
    if profile:
        res = run_backtest(
            open_db(cfg),
            cfg,
            validate_ticker(ticker),
            get_profile(profile),
            folds=folds,
            model_id=model_id,
            test_sessions=test_sessions,
            **options,
        )
    else:  # the model's own recipe: an LSTM's walk-forward, or a global recipe's fit on its panel
        from ldtm_core.accountability.gate.backtest_pool import backtest_model

        res = backtest_model(
            open_db(cfg), cfg, validate_ticker(ticker), folds, model_id, test_sessions, **options
        )
    table = Table(
        "fold",
        "cutoff",
        "train",
        "test",
        "n",
        "dir acc",
        "always-up",
        "model/up only",
        "p (beats up)",
        "|err| 1d",
        "leakage",
        title=f"backtest {res.backtest_id}",
    )
    for f in res.folds:
        w, sc = f.window, f.scores
        table.add_row(
            str(f.fold),
            str(w.cutoff),
            f"{w.train_start}..{w.train_end}",
            f"{w.test_start}..{w.test_end}",
            str(sc.n),
            fmt_pct(sc.direction_accuracy),
            fmt_pct(sc.always_up_accuracy),
            f"{sc.model_only_hits}/{sc.up_only_hits}",
            format_p_value(sc.skill.p_value),
            fmt_num(sc.mean_abs_pct_error),
            str(w.leakage_rows),
        )
    console.print(table)
    console.print(
        f"{res.ticker} model {res.model_id}: accuracy {fmt_pct(res.direction_accuracy)} vs always-up "
        f"{fmt_pct(res.always_up_accuracy)}, mean |err| {fmt_num(res.mean_abs_pct_error)}%, leakage {res.leakage_rows}"
    )
    if res.skill is not None:
        console.print(f"skill test vs always-up: {res.skill.describe()}")
    console.print(f"covered live: {res.live_note}")
    console.print(f"folds reused {res.reused_folds}, refit {res.refit_folds}")
    for paired in res.baselines.values():  # always-up, persistence, trailing majority: same rows
        console.print(f"the model {paired.verdict()}", highlight=False, soft_wrap=True)
    if res.tuning_note:
        err_console.print(f"[yellow]{res.tuning_note}[/]", highlight=False, soft_wrap=True)
    from ldtm_core.learning.registry import get_model

    own = res.model_id is not None and get_model(open_db(cfg), res.model_id).recipe_signature == (
        res.config_signature
    )
    console.print(
        f"config {res.config_signature[:12]}…, prices {res.data_start}..{res.data_end}"
        + ("" if own else " (not the candidate's own config: the gate will not use this backtest)")
    )


def _backtest_many(
    tickers: str,
    folds: int,
    workers: int | None,
    warm_start: bool,
    reuse: bool | None = None,
    end=None,
    recipe: str | None = None,
) -> None:
    """`ldtm backtest --tickers ...`: every ticker's newest candidate (of `recipe`), progress, one summary
    row each."""
    from ldtm_core.accountability.gate.backtest_pool import backtest_many, backtest_q_values
    from ldtm_core.data.universe import load_universe, resolve_tickers
    from ldtm_core.progress import progress
    from ldtm_core.scoring.skill import format_p_value

    cfg = settings()
    selection = None if tickers.strip().lower() == "all" else tickers
    chosen = resolve_tickers(selection, load_universe(cfg.universe), allow_new=True)
    open_db(cfg)
    with progress("backtest", len(chosen)) as advance:
        outcomes = backtest_many(
            cfg,
            chosen,
            folds=folds,
            max_workers=workers,
            warm_start=warm_start,
            reuse=reuse,
            on_outcome=lambda o: advance(f"{o.ticker} {o.status}"),
            end=end,
            recipe=recipe,
        )
    q = backtest_q_values(outcomes)  # the p-values read together: BH over every ticker with one
    counts = print_outcomes(
        f"backtest, {folds} folds" + (f", the newest {recipe} candidates" if recipe else ""),
        (
            "ticker",
            "model",
            "n",
            "dir acc",
            "always-up",
            "p (beats up)",
            f"q (BH over {len(q)})",
            "leakage",
            "duration",
            "status",
        ),
        outcomes,
        lambda o, status: (
            o.ticker,
            *(
                [""] * 8
                if (r := o.result) is None
                else (
                    str(r.model_id),
                    str(r.n),
                    fmt_pct(r.direction_accuracy),
                    fmt_pct(r.always_up_accuracy),
                    "" if r.skill is None else format_p_value(r.skill.p_value),
                    format_p_value(q[o.ticker]) if o.ticker in q else "",
                    str(r.leakage_rows),
                    f"{r.duration_s:.1f}s",
                )
            ),
            status + (f": {o.reason}" if o.reason else ""),
        ),
        {"ok": "green", "no candidate": "yellow", "failed": "red"},
    )
    leakage = sum(o.result.leakage_rows for o in outcomes if o.result is not None)
    done = [o.result for o in outcomes if o.result is not None]
    console.print(
        f"; leakage rows {leakage}; folds reused {sum(r.reused_folds for r in done)}, "
        f"refit {sum(r.refit_folds for r in done)}"
    )
    if counts["failed"] or leakage or not counts["ok"]:
        sys.exit(1)
