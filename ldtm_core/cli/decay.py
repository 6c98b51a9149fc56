"""`ldtm decay`: each ticker's published record, across model changes, against what its models' gate reports
promised, and its feature drift."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from ldtm_core.cli.common import app, console, fmt_num, fmt_pct, handle_errors, open_db
from ldtm_core.errors import NotFoundError


@app.command("decay")
@handle_errors
def decay_cmd(
    ticker: Annotated[
        list[str] | None, typer.Option("--ticker", "-t", help="Only these tickers (repeat the option)")
    ] = None,
    mode: str = typer.Option(
        "all", "--mode", help="Snapshots scored: all (live and out-of-sample replays), live or replay"
    ),
    notify: bool = typer.Option(
        False, "--notify", help="Also post the decaying tickers to LDTM_NOTIFY_WEBHOOK_URL"
    ),
) -> None:
    """CUSUM decay check of every ticker with an active model, on its published record across model
    changes, and PSI feature drift since the recipe's data cutoff (what the `leaderboard_decay`
    Dagster check reports each night; docs/operations.md says what to do on an alarm)."""
    from ldtm_core.accountability.decay.decay import DecaySettings, check, notify_decay
    from ldtm_core.accountability.decay.drift import BLIND_SPOTS
    from ldtm_core.config import Settings
    from ldtm_core.data.universe import parse_ticker_list

    tickers = parse_ticker_list(ticker) if ticker else None
    engine = open_db()
    report = check(engine, tickers, DecaySettings.from_env(mode=mode))
    unchecked = _without_model(engine, report, tickers)
    if tickers and len(unchecked) == len(tickers):  # nothing to check: not "no decay"
        raise NotFoundError("; ".join(unchecked.values()))
    table = Table(
        "ticker",
        "live n",
        "models",
        "live acc",
        "expected",
        "chart floor",
        "backtest",
        "always-up",
        "CUSUM / h",
        "vs up / h",
        "drift: unusual inputs (largest PSI)",
        "state",
        title="decay (published record across model changes; each row against its model's promise)",
    )
    for t in report.tickers:
        r = t.row()
        state = (
            f"[red]DECAYING (signal {r['alarm_since']})[/]"
            if t.decaying
            else (
                t.reason
                or (f"ok; {t.signals} earlier signal(s), last {r['last_signal']}" if t.signals else "ok")
            )
        )
        table.add_row(
            t.ticker,
            str(t.n),
            str(t.models),
            fmt_pct(r["live_accuracy"]),
            fmt_pct(r["expected_accuracy"]),
            fmt_pct(r["promised_accuracy"]),
            fmt_pct(r["backtest_accuracy"]),
            fmt_pct(r["always_up_accuracy"]),
            "—" if r["cusum"] is None else f"{r['cusum']:.2f} / {r['threshold']:.2f}",
            "—" if r["cusum_vs_up"] is None else f"{r['cusum_vs_up']:.2f} / {r['threshold_vs_up']:.2f}",
            "—"
            if r["psi_max"] is None
            else (f"unusual: {r['psi_unusual']}" if r["psi_unusual"] else "none unusual")
            + f" (largest {fmt_num(r['psi_max'], 3)}, {r['psi_feature']})",
            state,
        )
    console.print(table)
    console.print(
        "expected: the best estimate of the model's accuracy after the gate's selection (empirical Bayes over "
        "every stored backtest); chart floor: what the charts expect in control, the exact lower confidence "
        "bound of the backtest accuracy at the level the gate judged the model at, so an alarm needs a drop "
        "below it; backtest: the raw figure, which overstates a model kept because it passed",
        highlight=False,
        soft_wrap=True,
    )
    console.print(report.summary(), highlight=False, soft_wrap=True)
    console.print(f"[dim]Drift: {BLIND_SPOTS}.[/]", highlight=False, soft_wrap=True)
    if report.without_active:
        console.print(
            f"[yellow]not checked, no active model (ungated): {', '.join(report.without_active)}[/]",
            highlight=False,
        )
    for why in unchecked.values():
        console.print(f"[yellow]not checked: {escape(why)}[/]", highlight=False, soft_wrap=True)
    if notify and report.decaying:
        result = notify_decay(report, Settings.from_env().notify_webhook_url)
        console.print(f"notification {'posted' if result and result.posted else 'logged only'}")


def _without_model(engine, report, tickers: list[str] | None) -> dict[str, str]:
    """{ticker: why} for requested tickers the check did not cover, neither active nor ungated."""
    from ldtm_core.learning.registry import list_models

    covered = {t.ticker for t in report.tickers} | set(report.without_active)
    out = {}
    for t in tickers or []:
        if t in covered:
            continue
        models = list_models(engine, t)
        out[t] = (
            f"{t} has no model (unknown to the registry: train it first; `ldtm registry list` shows the models)"
            if not models
            else f"{t} has no active model (its {len(models)} model(s): "
            f"{', '.join(sorted({m.status for m in models}))})"
        )
    return out
