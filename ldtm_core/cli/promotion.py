"""Commands on a model's road to production: gate, registry (list, history, promote, rollback); the
backtest the gate reads is `ldtm backtest` (backtest.py)."""

from __future__ import annotations

import os
import sys

import typer
from rich.table import Table

from ldtm_core.cli.common import (
    app,
    console,
    err_console,
    fmt_num,
    handle_errors,
    open_db,
    settings,
)
from ldtm_core.errors import InputError

registry_app = typer.Typer(help="Model registry: list, history, rollback.", no_args_is_help=True)
app.add_typer(registry_app, name="registry")


@registry_app.command("list")
@handle_errors
def registry_list(
    ticker: str = typer.Option(None, "--ticker", help="Only this ticker"),
    recipe: str = typer.Option(None, "--recipe", "-r", help="Only this recipe's models"),
) -> None:
    """Every registered model with its recipe, status and version."""
    from ldtm_core.learning.recipes import LSTM, get
    from ldtm_core.learning.registry import list_models

    if recipe is not None:
        get(recipe)  # an unknown recipe is refused naming the known ones
    table = Table(
        "id",
        "ticker",
        "recipe",
        "status",
        "version",
        "profile",
        "trained on",
        "val loss",
        title="model registry" + (f": recipe {recipe}" if recipe else ""),
    )
    for m in list_models(open_db(), ticker):
        if recipe is not None and m.recipe != recipe:
            continue
        table.add_row(
            str(m.id),
            m.ticker,
            m.recipe,
            m.status,
            m.version or "",
            m.profile if m.recipe == LSTM else "",  # the LSTM's settings; another recipe's is its config
            str(m.trained_on_date),
            fmt_num(m.val_loss, 5),
        )
    console.print(table)


@registry_app.command("history")
@handle_errors
def registry_history(ticker: str = typer.Argument(..., help="Ticker")) -> None:
    """Every registry transition of a ticker: time, model, from, to, reason."""
    from ldtm_core.data.universe import validate_ticker
    from ldtm_core.learning.registry import history

    events = history(open_db(), validate_ticker(ticker))
    table = Table("at", "model", "from", "to", "reason", title=f"{ticker}: {len(events)} events")
    for e in events:
        table.add_row(str(e.at)[:19], str(e.model_id), e.from_status or "", e.to_status, e.reason)
    console.print(table)


BY_HELP = "who makes this override, recorded with it (default: LDTM_OPERATOR, else the login name)"


def operator_name(given: str | None) -> str:
    """--by, else LDTM_OPERATOR, else the login name: who a manual override is recorded and notified as."""
    import getpass

    from ldtm_core.config import env_text

    name = (given if given is not None else env_text("LDTM_OPERATOR") or "").strip()
    if not name:
        try:
            name = getpass.getuser()
        except (KeyError, OSError):  # no login name in a container without a passwd entry
            name = f"uid {os.getuid()}"
    if len(name) > 64 or not name.isprintable():
        raise InputError(f"--by / LDTM_OPERATOR: a name of at most 64 printable characters, got {len(name)}")
    return name


def notify_override(event: str, who: str, ticker: str, model_id: int, reason: str) -> None:
    from ldtm_core.accountability.alerts import notify

    payload = {"event": event, "by": who, "ticker": ticker, "model_id": model_id, "reason": reason}
    notify.send(
        payload,
        settings().notify_webhook_url,
        text=f"{event} of {ticker} model {model_id} by {who}: {reason}",
    )


@registry_app.command("promote")
@handle_errors
def registry_promote(
    ticker: str = typer.Argument(..., help="Ticker"),
    model_id: int = typer.Option(..., "--model-id", help="The candidate to make active"),
    reason: str = typer.Option(
        ..., "--reason", help="Why the gate is overridden: recorded in the registry history"
    ),
    by: str = typer.Option(None, "--by", help=BY_HELP),
) -> None:
    """Promote a candidate by hand, over the gate's decision (a deliberate override, logged)."""
    from ldtm_core.data.universe import validate_ticker
    from ldtm_core.learning.registry import get_model, promote

    ticker = validate_ticker(ticker)
    if not reason.strip():
        raise InputError("--reason must say why the gate is overridden")
    who = operator_name(by)
    cfg = settings()
    engine = open_db(cfg)
    rec = get_model(engine, model_id)
    if rec.ticker != ticker:
        raise InputError(f"model {model_id} belongs to {rec.ticker}, not {ticker}")
    res = promote(engine, model_id, f"manual override of the gate by {who}: {reason.strip()}", cfg)
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
    notify_override("manual promotion", who, ticker, model_id, reason.strip())


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
    by: str = typer.Option(None, "--by", help=BY_HELP),
) -> None:
    """Retire the active model and reactivate the one active before it (or --to MODEL_ID)."""
    from ldtm_core.data.universe import validate_ticker
    from ldtm_core.learning.registry import rollback

    who = operator_name(by)
    engine = open_db()
    res = rollback(engine, validate_ticker(ticker), f"{reason} (by {who})", to_model_id=to)
    notify_override("manual rollback", who, res.ticker, res.reactivated_model_id, reason)
    console.print(
        f"{res.ticker}: model {res.reactivated_model_id} ({res.version}) active again; "
        f"retired {res.retired_model_id if res.retired_model_id is not None else 'nothing'}"
    )
    # A shadow was compared with the model just rolled back: end it now rather than re-point it.
    from ldtm_core.accountability.shadow.shadow import conclude

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
    by: str = typer.Option(None, "--by", help=BY_HELP + "; with --force"),
    alone: bool = typer.Option(
        False,
        "--alone",
        help="judge a global recipe's candidate on this ticker's rows alone (its policy is one decision for "
        "the universe: `ldtm universe decide`)",
    ),
) -> None:
    """Judge one ticker's candidate on its newest backtest, paired with the champion on the same rows:
    promote on pass; exit 1 and notify on fail. A per-ticker recipe's (the LSTM) policy; a global recipe's
    candidates are decided together by `ldtm universe decide` (--alone judges one ticker anyway)."""
    from ldtm_core.accountability.gate.gate import GateThresholds, run_gate
    from ldtm_core.data.universe import validate_ticker
    from ldtm_core.learning.recipes import get
    from ldtm_core.learning.registry import get_model, newest_candidate

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
    found = (
        get_model(open_db(cfg), model_id)
        if model_id is not None
        else newest_candidate(open_db(cfg), validate_ticker(ticker))
    )
    if found is not None and get(found.recipe).scope == "global" and not alone:
        raise InputError(
            f"model {found.id} of {found.ticker} is a {found.recipe} candidate: a global recipe is decided once "
            f"for the universe (`ldtm universe decide --recipe {found.recipe}`); `ldtm gate --alone` judges this "
            "ticker on its own rows anyway"
        )
    import logging

    # The notification's log line is the summary printed below: without a handler of its own the
    # warning reaches the terminal through Python's last resort, and the operator read it twice.
    quiet = logging.NullHandler()
    notify_log = logging.getLogger("ldtm.notify")
    notify_log.addHandler(quiet)
    try:
        report = run_gate(
            open_db(cfg),
            cfg,
            validate_ticker(ticker),
            model_id,
            thresholds,
            force=force,
            forced_by=operator_name(by) if force else None,
        )
    finally:
        notify_log.removeHandler(quiet)
    table = Table(
        "criterion", "value", "threshold", "ok", title=f"gate {report.ticker} model {report.model_id}"
    )
    from ldtm_core.accountability.gate.gate import _fmt

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
            from ldtm_core.learning.registry import active_model

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
