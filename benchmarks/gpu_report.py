"""The GPU check's Markdown (benchmarks/gpu_check.py): the headline figures beside the seed's, then
every stage with its time against the budget. Reads only the check's JSON report."""

from __future__ import annotations


def _stage(report: dict, name: str) -> dict:
    return next(
        (s for s in report["stages"] if s["name"] == name), {"status": "absent", "result": {}, "note": ""}
    )


def _fmt(value, suffix: str = "") -> str:
    if value is None or value == "":
        return "–"
    if isinstance(value, float):
        value = f"{value:,.1f}" if abs(value) >= 10 else f"{value:.3g}"
    return f"{value}{suffix}"


def _or_why(st: dict, text: str) -> str:
    return text if st["status"] == "ok" else f"{st['status']}: {st['note']}"


def headline(report: dict) -> list[tuple[str, str, str]]:
    """(figure, this run, the seed's GB10 figure or the target) rows."""
    rt, rp = _stage(report, "retrain"), _stage(report, "retrain_every_slot")
    ctx, pred, bat = _stage(report, "context"), _stage(report, "predict"), _stage(report, "batched")
    slots, bench, conc = _stage(report, "slots"), _stage(report, "bench"), _stage(report, "concurrency")
    r = rt["result"]
    rows = [
        (
            f"{r.get('trained', '?')}-ticker retrain, {report['config']['profile']} profile, wall",
            _or_why(
                rt,
                f"{_fmt(r.get('wall_s'), ' s')} ({r.get('workers')} workers, {', '.join(r.get('precision', []))}, "
                f"{', '.join(r.get('devices', []))})",
            ),
            "~20 min on a GB10 with 4 slots; target ~1 min on one H100",
        ),
        (
            "per-ticker fit, median (max)",
            f"{_fmt(r.get('per_ticker_median_s'), ' s')} ({_fmt(r.get('per_ticker_max_s'), ' s')})",
            "~52 s average on a GB10",
        ),
        (
            "GPU memory per training process, median (max) peak",
            f"{_fmt(r.get('process_peak_mib_median'), ' MiB')} ({_fmt(r.get('process_peak_mib_max'), ' MiB')})",
            "~310 MiB per container",
        ),
        (
            "CUDA context per process",
            _or_why(ctx, _fmt(ctx["result"].get("context_mib"), " MiB")),
            "~250 MiB",
        ),
    ]
    if rp["status"] != "absent":
        q = rp["result"]
        rows.append(
            (
                "the same retrain with every slot the VRAM allows",
                _or_why(
                    rp,
                    f"{_fmt(q.get('wall_s'), ' s')} ({q.get('workers')} workers asked, {q.get('gpu_processes')} on the card, "
                    f"{_fmt(q.get('card_used_peak_mib'), ' MiB')} in use at the peak)",
                ),
                "",
            )
        )
    p = pred["result"]
    rows.append(
        (
            f"predict one evening for all tickers (`ldtm predict`), then {p.get('replay_evenings', '?')} replayed",
            _or_why(pred, f"{_fmt(p.get('one_evening_s'), ' s')}, {_fmt(p.get('replay_s'), ' s')}"),
            "~2 s for 103 with 4 slots",
        )
    )
    b = bat["result"]
    rows.append(
        (
            f"batched forward of {b.get('models', '?')} models: CPU vs card",
            _or_why(
                bat,
                f"{_fmt(b.get('cpu_ms'), ' ms')} vs {_fmt(b.get('cuda:0_ms'), ' ms')} "
                f"(max diff {_fmt(b.get('max_abs_diff_cuda_vs_cpu'))})",
            ),
            "~2 ms GPU forward per ticker",
        )
    )
    cells = bench["result"].get("cells", [])
    fp32 = {
        c["batch_size"]: c["samples_per_s"] for c in cells if c["precision"] == "fp32" and c["samples_per_s"]
    }
    speed = [
        f"{c['precision']}@{c['batch_size']} {c['samples_per_s'] / fp32[c['batch_size']]:.2f}x"
        for c in cells
        if c["precision"] != "fp32" and c["samples_per_s"] and c["batch_size"] in fp32
    ]
    rows.append(("bf16/fp16 vs fp32 (training step)", _or_why(bench, ", ".join(speed) or "–"), "FP16 ~1.2x"))
    s = slots["result"]
    stable = r.get("plan_own_aware"), r.get("plan_free_only")
    rows.append(
        (
            "VRAM-derived pool",
            _or_why(
                slots,
                f"{s.get('plan_total')} slots ({s.get('plan_reason')}); during the retrain "
                f"{_fmt(stable[0])} counting the pool's own jobs, {_fmt(stable[1])} from free memory alone",
            ),
            "4 slots beside a 39 GB LLM",
        )
    )
    rec = _stage(report, "recipes")
    if rec["status"] != "absent":
        fits = [
            f"{name}: {_fmt(f.get('wall_s'), ' s')}, "
            + (f"{f['trained']} trained" if "trained" in f else f["error"])
            for name, f in rec["result"].items()
            if isinstance(f, dict) and "wall_s" in f
        ]
        rows.append(("global recipes' GPU paths, one fit each", _or_why(rec, "; ".join(fits)), ""))
    conc_rows = conc["result"].get("rows", [])
    rows.append(
        (
            "processes training on one card at once: total samples/s",
            _or_why(conc, ", ".join(f"{x['processes']}: {x['total_samples_per_s']:,}" for x in conc_rows)),
            "",
        )
    )
    return rows


def render(report: dict) -> str:
    env = report["environment"]
    lines = [
        f"GPU check ({report['mode']}), {report['when']}: {env.get('device', 'no CUDA device')}, driver "
        f"{env.get('driver', '?')}, torch {env.get('torch', '?')} (CUDA {env.get('torch_cuda')}, cuDNN "
        f"{env.get('cudnn')}), {env.get('cpu', '?')} x {env.get('cores', '?')} cores, {env.get('ram_gib', '?')} GiB, "
        f"onnxruntime {env.get('onnxruntime', '?')}.",
        "",
        "| figure | this run | seed (GB10) / target |",
        "|---|---|---|",
        *(f"| {a} | {b} | {c} |" for a, b, c in headline(report)),
        "",
        f"Stages: {report['total_s']} s in all, budget {report['budget_s']} s.",
        "",
        "| stage | status | wall s | note |",
        "|---|---|---|---|",
        *(
            f"| {s['name']} | {s['status']} | {s['wall_s']} | {s['note'].replace('|', '/')[:200]} |"
            for s in report["stages"]
        ),
        "",
    ]
    return "\n".join(lines)
