"""Commands on a model's road to production: backtest, gate, registry (list, history, rollback)."""

from __future__ import annotations

import sys

import typer
from rich.table import Table

from ldtm_core.cli import (
    app,
    console,
    err_console,
    fmt_num,
    fmt_pct,
    handle_errors,
    open_db,
    print_outcomes,
    settings,
)
from ldtm_core.errors import InputError

registry_app = typer.Typer(help="Model registry: list, history, rollback.", no_args_is_help=True)
app.add_typer(registry_app, name="registry")


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
) -> None:
    """Walk-forward backtest with the purge; writes backtest_folds rows."""
    from ldtm_core.accountability.skill import format_p_value
    from ldtm_core.data.universe import validate_ticker
    from ldtm_core.learning.backtest import DEFAULT_WARM_START, run_backtest
    from ldtm_core.learning.model import get_profile

    if (ticker is None) == (tickers is None):
        raise InputError("give exactly one of --ticker T (one backtest, every fold) or --tickers T1,T2|all")
    warm = DEFAULT_WARM_START if warm_start is None else warm_start
    if tickers is not None:
        if profile or model_id is not None or test_sessions is not None:
            raise InputError("--profile, --model-id and --test-sessions go with --ticker, not --tickers")
        _backtest_many(tickers, folds, workers, warm, False if no_reuse else None)
        return
    cfg = settings()
    res = run_backtest(
        open_db(cfg),
        cfg,
        validate_ticker(ticker),
        get_profile(profile) if profile else None,
        folds=folds,
        model_id=model_id,
        test_sessions=test_sessions,
        warm_start=warm,
        reuse=False if no_reuse else None,
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
        table.add_row(
            str(f.fold),
            str(f.cutoff),
            f"{f.train_start}..{f.train_end}",
            f"{f.test_start}..{f.test_end}",
            str(f.n),
            fmt_pct(f.direction_accuracy),
            fmt_pct(f.always_up_accuracy),
            f"{f.model_only_hits}/{f.up_only_hits}",
            format_p_value(f.skill.p_value),
            fmt_num(f.mean_abs_pct_error),
            str(f.leakage_rows),
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
    from ldtm_core.accountability.registry import config_signature, get_model

    own = res.model_id is not None and config_signature(get_model(open_db(cfg), res.model_id).config) == (
        res.config_signature
    )
    console.print(
        f"config {res.config_signature[:12]}…, prices {res.data_start}..{res.data_end}"
        + ("" if own else " (not the candidate's own config: the gate will not use this backtest)")
    )


def _backtest_many(
    tickers: str, folds: int, workers: int | None, warm_start: bool, reuse: bool | None = None
) -> None:
    """`ldtm backtest --tickers ...`: every ticker's newest candidate, progress, one summary row each."""
    from ldtm_core.accountability.skill import format_p_value
    from ldtm_core.data.universe import load_universe, resolve_tickers
    from ldtm_core.learning.backtest_pool import backtest_many
    from ldtm_core.progress import progress

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
        )
    counts = print_outcomes(
        f"backtest, {folds} folds",
        ("ticker", "model", "n", "dir acc", "always-up", "p (beats up)", "leakage", "duration", "status"),
        outcomes,
        lambda o, status: (
            o.ticker,
            *(
                [""] * 7
                if (r := o.result) is None
                else (
                    str(r.model_id),
                    str(r.n),
                    fmt_pct(r.direction_accuracy),
                    fmt_pct(r.always_up_accuracy),
                    "" if r.skill is None else format_p_value(r.skill.p_value),
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


@registry_app.command("list")
@handle_errors
def registry_list(ticker: str = typer.Option(None, "--ticker", help="Only this ticker")) -> None:
    """Every registered model with status and version."""
    from ldtm_core.accountability.registry import list_models

    table = Table(
        "id", "ticker", "status", "version", "profile", "trained on", "val loss", title="model registry"
    )
    for m in list_models(open_db(), ticker):
        table.add_row(
            str(m.id),
            m.ticker,
            m.status,
            m.version or "",
            m.profile,
            str(m.trained_on_date),
            fmt_num(m.val_loss, 5),
        )
    console.print(table)


@registry_app.command("history")
@handle_errors
def registry_history(ticker: str = typer.Argument(..., help="Ticker")) -> None:
    """Every registry transition of a ticker: time, model, from, to, reason."""
    from ldtm_core.accountability.registry import history
    from ldtm_core.data.universe import validate_ticker

    events = history(open_db(), validate_ticker(ticker))
    table = Table("at", "model", "from", "to", "reason", title=f"{ticker}: {len(events)} events")
    for e in events:
        table.add_row(str(e.at)[:19], str(e.model_id), e.from_status or "", e.to_status, e.reason)
    console.print(table)


@registry_app.command("promote")
@handle_errors
def registry_promote(
    ticker: str = typer.Argument(..., help="Ticker"),
    model_id: int = typer.Option(..., "--model-id", help="The candidate to make active"),
    reason: str = typer.Option(
        ..., "--reason", help="Why the gate is overridden: recorded in the registry history"
    ),
) -> None:
    """Promote a candidate by hand, over the gate's decision (a deliberate override, logged)."""
    from ldtm_core.accountability.registry import get_model, promote
    from ldtm_core.data.universe import validate_ticker

    ticker = validate_ticker(ticker)
    if not reason.strip():
        raise InputError("--reason must say why the gate is overridden")
    cfg = settings()
    engine = open_db(cfg)
    rec = get_model(engine, model_id)
    if rec.ticker != ticker:
        raise InputError(f"model {model_id} belongs to {rec.ticker}, not {ticker}")
    res = promote(engine, model_id, f"manual override of the gate: {reason.strip()}", cfg)
    if not res.changed:  # promote() writes no event for a model that is already active
        console.print(
            f"{ticker}: model {model_id} is already active as {res.version}; nothing changed "
            "(no history entry written)"
        )
        return
    console.print(
        f"{ticker}: model {model_id} active as {res.version}; retired "
        f"{res.retired_model_id if res.retired_model_id is not None else 'nothing'} "
        "(recorded in `ldtm registry history`)"
    )


@registry_app.command("rollback")
@handle_errors
def registry_rollback(
    ticker: str = typer.Argument(..., help="Ticker"),
    reason: str = typer.Option("manual rollback", "--reason", help="Recorded in the history"),
    to: int = typer.Option(
        None,
        "--to",
        help="MODEL_ID: reactivate this retired model of the ticker (default: the one active before "
        "the current one; each rollback goes one step further back)",
    ),
) -> None:
    """Retire the active model and reactivate the one active before it (or --to MODEL_ID)."""
    from ldtm_core.accountability.registry import rollback
    from ldtm_core.data.universe import validate_ticker

    engine = open_db()
    res = rollback(engine, validate_ticker(ticker), reason, to_model_id=to)
    console.print(
        f"{res.ticker}: model {res.reactivated_model_id} ({res.version}) active again; "
        f"retired {res.retired_model_id if res.retired_model_id is not None else 'nothing'}"
    )
    # A shadow was compared with the model just rolled back: end it now rather than re-point it (issue 28).
    from ldtm_core.accountability.shadow import conclude

    ended = conclude(engine, settings(), res.ticker)
    if ended is not None and ended.comparison.ended:
        console.print(
            f"shadow model {ended.comparison.shadow_model_id} ended, retired: {ended.comparison.ended}",
            highlight=False,
            soft_wrap=True,
        )


@app.command("gate")
@handle_errors
def gate_cmd(
    ticker: str = typer.Option(..., "--ticker", help="Ticker to gate"),
    model_id: int = typer.Option(None, "--model-id", help="Candidate (default newest)"),
    min_folds: int = typer.Option(None, "--min-folds", help="Default 2"),
    min_accuracy: float = typer.Option(
        None, "--min-accuracy", help="Next-day direction accuracy in % (default 52)"
    ),
    max_error: float = typer.Option(None, "--max-error", help="Mean |pct error| in % (default 5)"),
    beat_always_up: float = typer.Option(
        None, "--beat-always-up", help="Also require accuracy above always-up by this many % points"
    ),
    max_p_value: float = typer.Option(
        None,
        "--max-p-value",
        help="Also require the exact test of 'beats always-up' at p <= this (default LDTM_GATE_MAX_P_VALUE; off)",
    ),
    policy: str = typer.Option(
        None,
        "--policy",
        help="evidence (minimum evidence, then the seed's criteria) or seed (the seed's criteria alone); "
        "default LDTM_GATE_POLICY or evidence",
    ),
    min_rows: int = typer.Option(
        None,
        "--min-rows",
        help="Evidence policy: test rows over all folds (default LDTM_GATE_MIN_ROWS or 100)",
    ),
    min_fold_rows: int = typer.Option(
        None, "--min-fold-rows", help="Evidence policy: test rows in every fold (default 10)"
    ),
    alpha: float = typer.Option(
        None,
        "--alpha",
        help="Evidence policy: significance of the paired tests vs the champion, stale weights or "
        "always-up (default LDTM_GATE_ALPHA or 0.05)",
    ),
    force: bool = typer.Option(
        False, "--force", help="Judge the newest backtest again even if the gate already judged it"
    ),
) -> None:
    """Judge a candidate on its newest backtest, paired with the champion on the same rows: promote on
    pass; exit 1 and notify on fail."""
    from ldtm_core.accountability.gate import GateThresholds, run_gate
    from ldtm_core.data.universe import validate_ticker

    thresholds = GateThresholds.from_env(
        min_folds=min_folds,
        min_direction_accuracy=None if min_accuracy is None else min_accuracy / 100.0,
        max_mean_abs_pct_error=max_error,
        beat_always_up_margin=None if beat_always_up is None else beat_always_up / 100.0,
        max_p_value=max_p_value,
        policy=None if policy is None else policy.strip().lower(),
        min_rows=min_rows,
        min_fold_rows=min_fold_rows,
        alpha=alpha,
    )
    cfg = settings()
    import logging

    # The notification's log line is the summary printed below: without a handler of its own the
    # warning reaches the terminal through Python's last resort, and the operator read it twice.
    quiet = logging.NullHandler()
    notify_log = logging.getLogger("ldtm.notify")
    notify_log.addHandler(quiet)
    try:
        report = run_gate(open_db(cfg), cfg, validate_ticker(ticker), model_id, thresholds, force=force)
    finally:
        notify_log.removeHandler(quiet)
    table = Table(
        "criterion", "value", "threshold", "ok", title=f"gate {report.ticker} model {report.model_id}"
    )
    from ldtm_core.accountability.gate import _fmt

    for c in report.criteria:
        table.add_row(
            c.name,
            _fmt(c.name, c.value),
            f"{c.op} {_fmt(c.name, c.threshold)}",
            "yes" if c.passed else "[red]NO[/]",
        )
    console.print(table)
    from ldtm_core.cli.gate_tables import baselines_table, comparison_lines, comparison_table

    console.print(baselines_table(report))
    if report.comparison is not None:
        console.print(comparison_table(report))
        for line in comparison_lines(report):
            console.print(line, highlight=False, soft_wrap=True)
    console.print(f"evidence: {report.evidence}", highlight=False)
    console.print(report.summary())
    if report.passed:
        p = report.promoted
        if p.held_by_shadow is not None:
            console.print(
                f"not promoted yet: shadow model {p.held_by_shadow} is still in its live evenings; this "
                "candidate stays a candidate (`ldtm shadow status`, `ldtm shadow end` to end it by hand)"
            )
            return
        if p.shadow:  # LDTM_SHADOW_SESSIONS > 0 and a champion serving: live evenings decide
            from ldtm_core.accountability.registry import active_model

            champion = active_model(open_db(cfg), report.ticker)
            console.print(
                f"model {p.model_id} in shadow beside the champion (model {champion.id if champion else report.champion_id}): "
                "`ldtm shadow status` follows its live record; promoted or retired after "
                "LDTM_SHADOW_SESSIONS filled evenings"
            )
            return
        console.print(f"promoted: version {p.version} -> {p.promoted_path}")
        return
    if report.notified and report.notified.error:
        err_console.print(f"[yellow]webhook failed:[/] {report.notified.error}")
    sys.exit(1)
