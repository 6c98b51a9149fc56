"""Commands about this machine's capacity: gpu slots (the pool limit free VRAM allows), bench train
(training throughput)."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from ldtm_core.cli.common import app, console, handle_errors
from ldtm_core.errors import InputError

gpu_app = typer.Typer(help="GPU slots derived from free VRAM.", no_args_is_help=True)
bench_app = typer.Typer(help="Benchmarks.", no_args_is_help=True)
app.add_typer(gpu_app, name="gpu")
app.add_typer(bench_app, name="bench")


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


@bench_app.command("train")
@handle_errors
def bench_train(
    samples: int = typer.Option(4000, "--samples", help="training samples per variant"),
    epochs: int = typer.Option(3, "--epochs", help="timed epochs per variant"),
    threads: int = typer.Option(1, "--threads", help="torch threads in this process"),
    early_stop: bool = typer.Option(True, "--early-stop/--no-early-stop", help="also train to early stop"),
    pool_workers: int = typer.Option(2, "--pool-workers", help="concurrent processes for the projection"),
    device: str = typer.Option("cpu", "--device", help="cpu, cuda or cuda:N (the grid below runs there)"),
    batch_sizes: str = typer.Option(
        None, "--batch-sizes", help="e.g. 32,128,512: samples/s per batch size x precision instead"
    ),
    precisions: str = typer.Option(
        None, "--precisions", help="e.g. fp32,bf16,fp16 (with --batch-sizes; default fp32,bf16)"
    ),
    json_out: Annotated[
        Path | None, typer.Option("--json", help="also write the grid's cells to this JSON file")
    ] = None,
) -> None:
    """Project loop vs seed-style DataLoader loop vs the floor, plus a 103-ticker projection; or, with
    --batch-sizes/--precisions or a --device other than cpu, the batch size x precision grid there."""
    import torch

    from ldtm_core.learning.bench import run_bench

    if batch_sizes or precisions or device != "cpu":
        _bench_grid(device, batch_sizes or "32,128,512", precisions or "fp32,bf16", samples, epochs, json_out)
        return

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


def _int_list(raw: str, option: str) -> list[int]:
    try:
        return [int(v) for v in raw.split(",") if v.strip()]
    except ValueError:
        raise InputError(f"{option} {raw!r}: expected a comma list of integers such as 32,128,512") from None


def _bench_grid(device: str, batch_sizes: str, precisions: str, samples: int, epochs: int, json_out) -> None:
    import torch

    from ldtm_core.learning.bench import precision_grid

    cells = precision_grid(
        device,
        _int_list(batch_sizes, "--batch-sizes"),
        [p.strip() for p in precisions.split(",") if p.strip()],
        n_samples=samples,
        epochs=epochs,
    )
    where = torch.cuda.get_device_name(torch.device(device)) if device.startswith("cuda") else "CPU"
    table = Table(
        "batch",
        "precision",
        "samples/s",
        "vs fp32",
        "note",
        title=f"reference training step on {device} ({where}), {samples} samples x {epochs} epochs, "
        f"torch {torch.__version__}",
    )
    fp32 = {c.batch_size: c.samples_per_s for c in cells if c.precision == "fp32"}
    for c in cells:
        base = fp32.get(c.batch_size)
        ratio = f"{c.samples_per_s / base:.2f}x" if c.samples_per_s and base else ""
        rate = f"{c.samples_per_s:,.0f}" if c.samples_per_s else "-"
        table.add_row(str(c.batch_size), c.precision, rate, ratio, c.note)
    console.print(table)
    if json_out is not None:
        json_out.write_text(json.dumps([asdict(c) for c in cells], indent=1))
