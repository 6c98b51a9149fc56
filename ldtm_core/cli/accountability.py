"""Commands for the accountability loop: predict, fillback, leaderboard, audit, backtest, registry, gate."""

from __future__ import annotations

import math
import sys
from typing import Annotated

import typer
from rich.table import Table

from . import app, console, err_console, handle_errors, open_db, parse_date, settings

audit_app = typer.Typer(help="Check the snapshot hash chain.", no_args_is_help=True)
registry_app = typer.Typer(help="Model registry: list, history, rollback.", no_args_is_help=True)
app.add_typer(audit_app, name="audit")
app.add_typer(registry_app, name="registry")


def _tickers(values: list[str] | None) -> list[str] | None:
    if not values:
        return None
    from ..universe import validate_ticker

    return [validate_ticker(t) for v in values for t in v.split(",") if t.strip()]


def _pct(v) -> str:
    return "—" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v * 100:.1f}%"


def _num(v, digits=2) -> str:
    return "—" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.{digits}f}"


@app.command("predict")
@handle_errors
def predict_cmd(
    run_date: str = typer.Option(
        None, "--run-date", help="Session to predict from (default: latest with prices)"
    ),
    tickers: Annotated[
        list[str] | None,
        typer.Option("--tickers", "-t", help="Tickers (repeat or comma list); default all with a model"),
    ] = None,
    mode: str = typer.Option(None, "--mode", help="live or replay (default: replay when later prices exist)"),
    neutral_band: float = typer.Option(
        None, "--neutral-band", help="Neutral band in % (default LDTM_NEUTRAL_BAND_PCT or 0.25)"
    ),
) -> None:
    """Predict three horizons per ticker and record hash-chained snapshot rows (rerun = no-op)."""
    from ..snapshots import predict

    cfg = settings()
    res = predict(
        open_db(cfg), cfg, parse_date(run_date, "--run-date"), _tickers(tickers), mode, neutral_band
    )
    console.print(
        f"run {res.run_id} {res.run_date} ({res.mode}): {res.rows_written} rows written, "
        f"{res.rows_existing} already there; cohort "
        f"{res.cohort['bullish']} bullish / {res.cohort['neutral']} neutral / {res.cohort['bearish']} bearish"
    )
    console.print("phases: " + ", ".join(f"{k} {v * 1000:.0f} ms" for k, v in res.phases.items()))
    if res.used_candidate:
        console.print(f"[yellow]candidate models used (no active model):[/] {' '.join(res.used_candidate)}")
    for t, why in sorted(res.skipped.items()):
        err_console.print(f"[yellow]skipped {t}:[/] {why}", highlight=False, soft_wrap=True)
    if res.skipped and not res.tickers_predicted:
        sys.exit(1)


@app.command("fillback")
@handle_errors
def fillback_cmd(
    dry_run: bool = typer.Option(False, "--dry-run", help="List pending fills; write nothing"),
) -> None:
    """Fill actual closes into snapshot rows whose target dates now have prices."""
    from ..fillback import fillback

    cfg = settings()
    res = fillback(open_db(cfg), dry_run=dry_run, neutral_band_pct=cfg.neutral_band_pct)
    if dry_run:
        table = Table(
            "ticker",
            "run_date",
            "horizon",
            "target date",
            "actual",
            title=f"{len(res.pending)} pending fills",
        )
        for p in res.pending:
            table.add_row(p.ticker, str(p.run_date), p.horizon, str(p.target_date), f"{p.actual:.2f}")
        console.print(table)
        console.print("dry run: nothing written")
        return
    console.print("filled " + ", ".join(f"{h} {n}" for h, n in res.filled.items()))


@app.command("leaderboard")
@handle_errors
def leaderboard_cmd(
    mode: str = typer.Option("all", "--mode", help="all, live or replay"),
) -> None:
    """30-day accuracy per ticker with Wilson interval, errors, and the always-up/persistence baselines."""
    from ..leaderboard import leaderboard

    print_leaderboard(leaderboard(open_db(), mode), mode)


def print_leaderboard(df, mode: str = "all") -> None:
    """The leaderboard as a table plus the plain verdict (also used by the Dagster demo)."""
    from ..leaderboard import verdict

    title = f"accuracy_30d ({mode})"
    if not df.empty:
        title += f", {df['window_start'].min()} .. {df['window_end'].max()}"
    table = Table(
        "ticker",
        "n",
        "dir acc",
        "95% Wilson",
        "always-up",
        "persistence",
        "beats up",
        "|err| 1d",
        "|err| Mon",
        "|err| 1m",
        title=title,
    )
    for r in df.itertuples(index=False):
        table.add_row(
            r.ticker,
            str(r.n),
            _pct(r.direction_accuracy),
            f"{_pct(r.wilson_low)}–{_pct(r.wilson_high)}",
            _pct(r.always_up_accuracy),
            _pct(r.persistence_accuracy),
            "yes" if r.beats_always_up else "[red]no[/]",
            _num(r.next_day_mape),
            _num(r.next_monday_mape),
            _num(r.one_month_mape),
        )
    console.print(table)
    console.print(verdict(df))


@audit_app.command("verify")
@handle_errors
def audit_verify(
    tickers: Annotated[list[str] | None, typer.Option("--tickers", "-t", help="Only these tickers")] = None,
) -> None:
    """Recompute every ticker's hash chain; exit 1 and list each edited row if any."""
    from ..audit import verify

    report = verify(open_db(), _tickers(tickers))
    if report.ok:
        console.print(f"audit ok: {report.rows_checked} rows, {report.tickers_checked} tickers, chain intact")
        return
    table = Table("ticker", "run_date", "model_version", "problem", title=f"{len(report.problems)} problems")
    for p in report.problems:
        table.add_row(p.ticker, str(p.run_date), p.model_version, p.what)
    console.print(table)
    err_console.print(
        f"[bold red]audit FAILED[/]: {len(report.problems)} problems in {', '.join(report.bad_tickers)} "
        f"({report.rows_checked} rows checked)"
    )
    sys.exit(1)


@app.command("backtest")
@handle_errors
def backtest_cmd(
    ticker: str = typer.Option(..., "--ticker", help="Ticker to backtest"),
    folds: int = typer.Option(3, "--folds", help="Walk-forward folds"),
    profile: str = typer.Option(
        None, "--profile", help="Model profile (default: the candidate's own config)"
    ),
    model_id: int = typer.Option(
        None, "--model-id", help="Candidate the backtest validates (default newest)"
    ),
    test_sessions: int = typer.Option(
        None, "--test-sessions", help="Sessions per test fold (default up to 63)"
    ),
    warm_start: bool = typer.Option(
        None,
        "--warm-start/--cold-start",
        help="start fold k+1 from fold k's weights (fold 1 is always cold; default: cold)",
    ),
) -> None:
    """Walk-forward backtest with the purge; writes backtest_folds rows."""
    from ..backtest import DEFAULT_WARM_START, run_backtest
    from ..model import get_profile
    from ..universe import validate_ticker

    cfg = settings()
    res = run_backtest(
        open_db(cfg),
        cfg,
        validate_ticker(ticker),
        get_profile(profile) if profile else None,
        folds=folds,
        model_id=model_id,
        test_sessions=test_sessions,
        warm_start=DEFAULT_WARM_START if warm_start is None else warm_start,
    )
    table = Table(
        "fold",
        "cutoff",
        "train",
        "test",
        "n",
        "dir acc",
        "always-up",
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
            _pct(f.direction_accuracy),
            _pct(f.always_up_accuracy),
            _num(f.mean_abs_pct_error),
            str(f.leakage_rows),
        )
    console.print(table)
    console.print(
        f"{res.ticker} model {res.model_id}: accuracy {_pct(res.direction_accuracy)} vs always-up "
        f"{_pct(res.always_up_accuracy)}, mean |err| {_num(res.mean_abs_pct_error)}%, leakage {res.leakage_rows}"
    )


@registry_app.command("list")
@handle_errors
def registry_list(ticker: str = typer.Option(None, "--ticker", help="Only this ticker")) -> None:
    """Every registered model with status and version."""
    from ..registry import list_models

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
            _num(m.val_loss, 5),
        )
    console.print(table)


@registry_app.command("history")
@handle_errors
def registry_history(ticker: str = typer.Argument(..., help="Ticker")) -> None:
    """Every registry transition of a ticker: time, model, from, to, reason."""
    from ..registry import history
    from ..universe import validate_ticker

    events = history(open_db(), validate_ticker(ticker))
    table = Table("at", "model", "from", "to", "reason", title=f"{ticker}: {len(events)} events")
    for e in events:
        table.add_row(str(e.at)[:19], str(e.model_id), e.from_status or "", e.to_status, e.reason)
    console.print(table)


@registry_app.command("rollback")
@handle_errors
def registry_rollback(
    ticker: str = typer.Argument(..., help="Ticker"),
    reason: str = typer.Option("manual rollback", "--reason", help="Recorded in the history"),
) -> None:
    """Reactivate the most recently retired model and retire the current active one."""
    from ..registry import rollback
    from ..universe import validate_ticker

    res = rollback(open_db(), validate_ticker(ticker), reason)
    console.print(
        f"{res.ticker}: model {res.reactivated_model_id} ({res.version}) active again; "
        f"retired {res.retired_model_id if res.retired_model_id is not None else 'nothing'}"
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
) -> None:
    """Judge a candidate on its newest backtest: promote on pass; exit 1 and notify on fail."""
    from ..gate import GateThresholds, run_gate
    from ..universe import validate_ticker

    thresholds = GateThresholds.from_env(
        min_folds=min_folds,
        min_direction_accuracy=None if min_accuracy is None else min_accuracy / 100.0,
        max_mean_abs_pct_error=max_error,
        beat_always_up_margin=None if beat_always_up is None else beat_always_up / 100.0,
    )
    cfg = settings()
    report = run_gate(open_db(cfg), cfg, validate_ticker(ticker), model_id, thresholds)
    table = Table(
        "criterion", "value", "threshold", "ok", title=f"gate {report.ticker} model {report.model_id}"
    )
    from ..gate import _fmt

    for c in report.criteria:
        table.add_row(
            c.name,
            _fmt(c.name, c.value),
            f"{c.op} {_fmt(c.name, c.threshold)}",
            "yes" if c.passed else "[red]NO[/]",
        )
    console.print(table)
    console.print(report.summary())
    if report.passed:
        p = report.promoted
        console.print(f"promoted: version {p.version} -> {p.promoted_path}")
        return
    if report.notified and report.notified.error:
        err_console.print(f"[yellow]webhook failed:[/] {report.notified.error}")
    sys.exit(1)
