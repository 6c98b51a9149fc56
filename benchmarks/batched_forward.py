"""Inference's forward of many models: the hand-written batched recurrence vs torch.func over the real module.

    .venv/bin/python benchmarks/batched_forward.py [--models 103] [--repeat 7] [--threads 1]

For each profile, `--models` seeded models of that architecture (weights as predict loads them:
checkpoints.Weights, no nn.Module), one window each, timed in one process, variants interleaved:
  batched    inference.batched_forward: weights stacked, the recurrence as batched matrix products
             (learning.cells), one pass of W steps for all models
  func_loop  torch.func.functional_call of one LDTM skeleton with each model's weights in turn
             (torch's own LSTM kernel, one call per model)
  func_vmap  torch.func.vmap of that call over the stacked weights, where torch can batch the LSTM op
Prints the median wall of each, their ratio to `batched`, and the largest difference from it.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
from torch.func import functional_call, vmap  # noqa: E402

from ldtm_core.learning.checkpoints import Weights  # noqa: E402
from ldtm_core.learning.inference import batched_forward  # noqa: E402
from ldtm_core.learning.model import LDTM, PROFILES, ModelConfig  # noqa: E402


def _weights(cfg: ModelConfig, n: int) -> list[Weights]:
    out = []
    for seed in range(n):
        torch.manual_seed(seed)
        model = LDTM(cfg).eval()
        out.append(Weights(cfg, {k: v.detach().clone() for k, v in model.state_dict().items()}))
    return out


def func_loop(skeleton: LDTM, weights: list[Weights], x: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return torch.cat(
            [functional_call(skeleton, w.tensors, (x[i : i + 1],)) for i, w in enumerate(weights)]
        )


def func_vmap(skeleton: LDTM, weights: list[Weights], x: torch.Tensor) -> torch.Tensor:
    stacked = {k: torch.stack([w.tensors[k] for w in weights]) for k in weights[0].tensors}

    def one(params, xi):
        return functional_call(skeleton, params, (xi[None],))[0]

    with torch.no_grad():
        return vmap(one)(stacked, x)


def _median_ms(fn, repeat: int) -> float:
    walls = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        walls.append(time.perf_counter() - t)
    return 1000 * statistics.median(walls)


def run(profile: str, models: int, repeat: int) -> list[tuple[str, float | None, float | None, str]]:
    """[(variant, median ms, max |difference| from batched, note)] for one profile."""
    cfg = PROFILES[profile]
    weights = _weights(cfg, models)
    skeleton = LDTM(cfg).eval()
    x = torch.rand(models, cfg.window, cfg.input_size, generator=torch.Generator().manual_seed(0))
    variants = {
        "batched": lambda: batched_forward(weights, x),
        "func_loop": lambda: func_loop(skeleton, weights, x),
        "func_vmap": lambda: func_vmap(skeleton, weights, x),
    }
    want = variants["batched"]()
    runnable, notes, diffs = {}, {}, {}
    for name, fn in variants.items():
        try:
            diffs[name] = float((fn() - want).abs().max())  # also the warm-up
            runnable[name] = fn
        except RuntimeError as exc:  # vmap: no batching rule for aten::lstm
            notes[name] = str(exc).strip().splitlines()[0][:90]
    walls = {name: [] for name in runnable}
    for _ in range(repeat):  # interleaved, so a neighbour's load falls on every variant alike
        for name, fn in runnable.items():
            walls[name].append(_median_ms(fn, 1))
    return [
        (
            name,
            statistics.median(walls[name]) if name in walls else None,
            diffs.get(name),
            notes.get(name, ""),
        )
        for name in variants
    ]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", type=int, default=103)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument(
        "--threads", type=int, default=1, help="torch threads (predict runs with what it is given)"
    )
    ap.add_argument("--profiles", default="demo,reference", help="comma-separated: " + ",".join(PROFILES))
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    print(
        f"{args.models} models, median of {args.repeat}, {args.threads} thread(s), torch {torch.__version__}"
    )
    print("| profile | variant | ms | vs batched | max abs diff | note |\n|---|---|---|---|---|---|")
    for profile in args.profiles.split(","):
        rows = run(profile, args.models, args.repeat)
        base = rows[0][1]
        for name, ms, diff, note in rows:
            shown = "-" if ms is None else f"{ms:.1f}"
            ratio = "-" if ms is None else f"{ms / base:.2f}x"
            delta = "-" if diff is None else f"{diff:.1e}"
            print(f"| {profile} | {name} | {shown} | {ratio} | {delta} | {note} |")


if __name__ == "__main__":
    main()
