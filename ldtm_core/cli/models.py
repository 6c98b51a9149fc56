"""Commands for models: train, gpu slots, export onnx, bench train."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from ldtm_core.cli import (
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

gpu_app = typer.Typer(help="GPU slots derived from free VRAM.", no_args_is_help=True)
export_app = typer.Typer(help="Export models.", no_args_is_help=True)
bench_app = typer.Typer(help="Benchmarks.", no_args_is_help=True)
app.add_typer(gpu_app, name="gpu")
app.add_typer(export_app, name="export")
app.add_typer(bench_app, name="bench")


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
        help="demo | reference | upgrade | tuned (per ticker, from `ldtm tune`)",
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
) -> None:
    """Train, checkpoint and register a candidate model per ticker."""
    from ldtm_core.data.universe import load_universe, resolve_tickers
    from ldtm_core.learning.training import parse_overrides
    from ldtm_core.learning.training_pool import train_many
    from ldtm_core.learning.tuning_store import check_profile

    cfg_settings = settings()
    parsed = parse_overrides(overrides)
    check_profile(profile, parsed)  # refuse a bad profile/override before touching anything
    when = parse_date(as_of, "--as-of")
    universe = load_universe(cfg_settings.universe)
    selection = None if tickers.strip().lower() == "all" else tickers
    chosen = resolve_tickers(selection, universe, allow_new=allow_new)
    open_db(cfg_settings)
    cfg_settings.require_writable(cfg_settings.checkpoint_dir, "the trained checkpoints")
    from ldtm_core.learning.warm_start import DEFAULT_WARM_START
    from ldtm_core.progress import progress

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

    counts = print_outcomes(
        f"train ({profile})",
        ("ticker", "settings", "device", "duration", "epochs", "status", "val_loss", "reason"),
        outcomes,
        lambda o, status: (
            o.ticker,
            o.profile or "",
            o.device or "",
            f"{o.duration_s:.1f}s",
            "" if o.epochs is None else str(o.epochs),
            status,
            _fmt(o.val_loss, ".5f"),
            o.reason,
        ),
        {"trained": "green", "skipped": "yellow", "failed": "red"},
    )
    console.print()
    if not counts["trained"]:
        err_console.print("[bold red]error:[/] nothing was trained", highlight=False)
    if counts["failed"] or not counts["trained"]:
        sys.exit(1)


@gpu_app.command("slots")
@handle_errors
def gpu_slots_cmd(
    per_job_mib: int = typer.Option(None, help="MiB per job (default 600 or LDTM_GPU_PER_JOB_MIB)"),
    headroom_mib: int = typer.Option(
        None, help="MiB kept free per GPU (default 1024 or LDTM_GPU_HEADROOM_MIB)"
    ),
) -> None:
    """Per-GPU free memory and slots, and the resulting pool limit."""
    from ldtm_core.learning.gpu_slots import current_plan, probe

    kw = {k: v for k, v in (("per_job_mib", per_job_mib), ("headroom_mib", headroom_mib)) if v is not None}
    gpus = {g.index: g for g in probe()}
    plan = current_plan(**kw)
    table = Table("gpu", "name", "total MiB", "free MiB", "slots", title="GPU slots")
    for idx, free, slots in plan.per_gpu:
        g = gpus.get(idx)
        table.add_row(str(idx), g.name if g else "?", str(g.total_mib) if g else "?", str(free), str(slots))
    if plan.per_gpu:
        console.print(table)
    console.print(f"pool limit: {plan.total} ({plan.kind}) - {plan.reason}")


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


@bench_app.command("train")
@handle_errors
def bench_train(
    samples: int = typer.Option(4000, "--samples", help="training samples per variant"),
    epochs: int = typer.Option(3, "--epochs", help="timed epochs per variant"),
    threads: int = typer.Option(1, "--threads", help="torch threads in this process"),
    early_stop: bool = typer.Option(True, "--early-stop/--no-early-stop", help="also train to early stop"),
    pool_workers: int = typer.Option(2, "--pool-workers", help="concurrent processes for the projection"),
) -> None:
    """Project loop vs seed-style DataLoader loop vs the floor, plus a 103-ticker projection."""
    import torch

    from ldtm_core.learning.bench import run_bench

    r = run_bench(samples, epochs, threads, early_stop, pool_workers)
    table = Table(
        "variant",
        "samples/s",
        "vs floor (c)",
        title=f"training throughput ({samples} samples x {epochs} epochs, "
        f"reference model, {threads} thread(s), torch {torch.__version__})",
    )
    names = {
        "a": "(a) project loop (fit's epoch loop)",
        "a+": "(a+) fit() incl. validation + early-stop bookkeeping",
        "b": "(b) seed-style Dataset + DataLoader(batch 32)",
        "c": "(c) floor: pre-built batches",
    }
    for key in ("a", "a+", "b", "c"):
        table.add_row(names[key], f"{r.rates[key]:,.0f}", f"{r.rates[key] / r.rates['c']:.3f}")
    console.print(table)
    ratios = r.ratios
    console.print(
        f"a/c = {ratios['a/c']:.3f} (target >= 0.9)   a/b = {ratios['a/b']:.3f} (target > 1)   a+/a = {ratios['a+/a']:.3f}"
    )
    if r.pool:
        per = ", ".join(f"{x:,.0f}" for x in r.pool["per_worker"])
        console.print(
            f"{r.pool['workers']} processes x 1 thread at once: {per} samples/s each, {r.pool['total']:,.0f} total"
        )
    if r.early_stop:
        es = r.early_stop
        console.print(
            f"early stop (reference, one synthetic ticker, {es['n_train']} train / {es['n_val']} val): "
            f"{es['epochs']} epochs (best {es['best_epoch']}), {es['duration_s']:.1f}s, val_loss {es['val_loss']:.5f}"
        )
    if r.projection:
        p = r.projection
        console.print(
            f"projected {p['tickers']}-ticker retrain: {p['wall_s'] / 60:.1f} min wall "
            f"({p['workers']} workers x 1 thread, {p['per_ticker_s']:.1f}s per ticker incl. x{p['contention_slowdown']:.2f} contention)"
        )
    from ldtm_core.learning.gpu_slots import cpu_count

    console.print(
        f"bench took {r.seconds:.0f}s on {cpu_count()} core(s); 1-min load average {r.load[0]:.2f} before, "
        f"{r.load[1]:.2f} after (other processes' load lowers every absolute figure)"
    )
