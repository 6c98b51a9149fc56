"""The GPU check's measurements that need torch on the device, one per process (benchmarks/gpu_check.py).

    python benchmarks/gpu_probes.py NAME [JSON arguments]     # prints one JSON object, last line

env          versions, the card, the CPU, onnxruntime's providers, trtexec
context      CUDA context cost (NVML's view of this process minus what torch reserved), one reference
             training step per precision (which ones cuDNN's LSTM runs), and this process's peak
concurrency  K spawned processes train the reference model on one card at once, released together by a
             barrier: samples/s each and in total (what more slots on one card buy)
batched      the batched forward of the newest candidates on the card vs the CPU: agreement and wall
onnx         an exported model through onnxruntime's CUDA provider vs PyTorch (where that provider exists)

Each runs on the CPU too (`--cpu` dry run): what needs CUDA then says it was skipped and why.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

MIB = 1024 * 1024


def _device() -> torch.device:
    return torch.device("cuda:0" if torch.cuda.is_available() else "cpu")


def _nvml_own_mib() -> float | None:
    """This process's GPU memory as NVML sees it (None where NVML lists no memory per process)."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            handle = pynvml.nvmlDeviceGetHandleByIndex(0)
            for p in pynvml.nvmlDeviceGetComputeRunningProcesses(handle):
                if int(p.pid) == os.getpid() and p.usedGpuMemory is not None:
                    return int(p.usedGpuMemory) / MIB
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # noqa: BLE001 - reported as "not visible", never fatal
        return None
    return None


def env(_args: dict) -> dict:
    import numpy
    import onnxruntime
    import pandas

    from ldtm_core.learning.gpu_slots import cpu_count
    from ldtm_core.learning.precision import describe_cpu

    out = {
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "numpy": numpy.__version__,
        "pandas": pandas.__version__,
        "onnxruntime": onnxruntime.__version__,
        "ort_providers": onnxruntime.get_available_providers(),
        "cpu": describe_cpu(),
        "cores": cpu_count(),
        "ram_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
        "cuda_available": torch.cuda.is_available(),
    }
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        out.update(
            device=props.name,
            capability=f"{props.major}.{props.minor}",
            multiprocessors=props.multi_processor_count,
            vram_mib=props.total_memory // MIB,
            bf16=torch.cuda.is_bf16_supported(),
        )
    try:
        import pynvml

        pynvml.nvmlInit()
        driver = pynvml.nvmlSystemGetDriverVersion()
        out["driver"] = driver.decode() if isinstance(driver, bytes) else str(driver)
        pynvml.nvmlShutdown()
    except Exception as exc:  # noqa: BLE001
        out["driver"] = f"NVML: {type(exc).__name__}"
    from shutil import which

    out["trtexec"] = which("trtexec") or (
        "/usr/src/tensorrt/bin/trtexec" if Path("/usr/src/tensorrt/bin/trtexec").exists() else None
    )
    return out


def _train_steps(cfg, dev: torch.device, precision: str, steps: int = 3, batch: int = 128) -> float:
    """Seconds per reference training step after one warm-up, in `precision`; raises where it cannot run."""
    from ldtm_core.learning.model import LDTM
    from ldtm_core.learning.precision import PRECISIONS
    from ldtm_core.learning.training_loop import EpochLoop, make_optimizer

    torch.manual_seed(0)
    model = LDTM(cfg).to(dev)
    scaler = torch.amp.GradScaler("cuda") if precision == "fp16" else None
    loop = EpochLoop(
        model, make_optimizer(model, cfg, dev), batch, autocast_dtype=PRECISIONS[precision], scaler=scaler
    )
    x = torch.rand(batch * steps, cfg.window, cfg.input_size, device=dev)
    y = torch.rand(batch * steps, len(cfg.horizons), device=dev)
    loop.run(x[:batch], y[:batch], torch.arange(batch, device=dev))
    t = time.perf_counter()
    loop.run(x, y, torch.arange(len(x), device=dev))
    return (time.perf_counter() - t) / steps


def context(_args: dict) -> dict:
    from ldtm_core.learning.model import get_profile
    from ldtm_core.learning.precision import amp_dtype, precision_name

    dev = _device()
    cfg = get_profile("reference")
    out: dict = {"device": str(dev)}
    if dev.type == "cuda":  # before anything else touches the card: cuBLAS/cuDNN handles are not context
        torch.zeros(1, device=dev)
        torch.cuda.synchronize()
        nvml = _nvml_own_mib()
        reserved = torch.cuda.memory_reserved(dev) / MIB
        out.update(
            process_after_init_mib=nvml,
            torch_reserved_mib=reserved,
            context_mib=None if nvml is None else round(nvml - reserved, 1),
        )
    # amp=auto's choice here: on a card it times the reference step in both precisions (cached).
    out["auto_precision"] = precision_name(amp_dtype(cfg, dev))
    steps = {}
    for precision in ("fp32", "bf16", "fp16"):
        try:
            steps[precision] = {"ms_per_step": round(1000 * _train_steps(cfg, dev, precision), 3)}
        except Exception as exc:  # noqa: BLE001 - which precisions this card and cuDNN run is the finding
            steps[precision] = {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}"}
    out["train_step"] = steps
    if dev.type == "cuda":
        out.update(
            process_after_training_mib=_nvml_own_mib(),
            torch_max_reserved_mib=torch.cuda.max_memory_reserved(dev) / MIB,
            torch_max_allocated_mib=round(torch.cuda.max_memory_allocated(dev) / MIB, 2),
        )
    return out


def _concurrent_worker(barrier, results, seconds: float, batch: int, seed: int) -> None:
    torch.set_num_threads(1)
    from ldtm_core.learning.model import LDTM, get_profile
    from ldtm_core.learning.precision import amp_dtype
    from ldtm_core.learning.training_loop import EpochLoop, make_optimizer, setup_device

    dev = _device()
    setup_device(dev, 1)
    cfg = get_profile("reference", seed=seed)
    torch.manual_seed(seed)
    model = LDTM(cfg).to(dev)
    dtype = amp_dtype(cfg, dev)
    scaler = torch.amp.GradScaler("cuda") if dtype == torch.float16 else None
    loop = EpochLoop(model, make_optimizer(model, cfg, dev), batch, autocast_dtype=dtype, scaler=scaler)
    n = 4096  # about one ticker's training rows
    x = torch.rand(n, cfg.window, cfg.input_size, device=dev)
    y = torch.rand(n, len(cfg.horizons), device=dev)
    perm = torch.arange(n, device=dev)
    loop.run(x, y, perm)  # warm-up: kernels, cuDNN plans
    barrier.wait()
    done, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        loop.run(x, y, perm)
        done += n
    results.put((os.getpid(), done / (time.perf_counter() - t0)))


def concurrency(args: dict) -> dict:
    """For each K in args['ks']: K processes at once, each its own samples/s; the sum is the card's."""
    ctx = mp.get_context("spawn")
    rows = []
    for k in args["ks"]:
        barrier, results = ctx.Barrier(k), ctx.Queue()
        procs = [
            ctx.Process(target=_concurrent_worker, args=(barrier, results, args["seconds"], args["batch"], i))
            for i in range(k)
        ]
        t = time.perf_counter()
        for p in procs:
            p.start()
        rates = [results.get(timeout=args["seconds"] + 240)[1] for _ in procs]
        for p in procs:
            p.join()
        rows.append(
            {
                "processes": k,
                "total_samples_per_s": round(sum(rates)),
                "median_per_process": round(statistics.median(rates)),
                "wall_s": round(time.perf_counter() - t, 1),
            }
        )
    return {"device": str(_device()), "batch": args["batch"], "seconds": args["seconds"], "rows": rows}


def _newest_weights() -> list:
    from sqlalchemy import func, select

    from ldtm_core.config import Settings
    from ldtm_core.db import get_engine
    from ldtm_core.learning.checkpoints import load_weights
    from ldtm_core.schema import model_registry as reg

    engine = get_engine(Settings.from_env().database_url)
    newest = select(func.max(reg.c.id)).group_by(reg.c.ticker)
    with engine.connect() as conn:
        rows = conn.execute(select(reg.c.checkpoint_path, reg.c.ticker).where(reg.c.id.in_(newest))).all()
    return [load_weights(path, ticker=ticker).model for path, ticker in rows]


def batched(args: dict) -> dict:
    """103 tickers' forward in one batched pass, CPU vs card: same numbers, and each one's wall."""
    from ldtm_core.learning.inference import batched_forward

    weights = _newest_weights()
    if not weights:
        return {"error": "no trained models in the registry"}
    cfg = weights[0].cfg
    weights = [w for w in weights if w.cfg.signature == cfg.signature]
    x = torch.rand(len(weights), cfg.window, cfg.input_size, generator=torch.Generator().manual_seed(0))
    out = {"models": len(weights)}
    results = {}
    for dev in ["cpu"] + (["cuda:0"] if torch.cuda.is_available() else []):
        xd = x.to(dev)
        batched_forward(weights, xd)  # warm-up (and, on the card, the weights' first copy)
        walls = []
        for _ in range(args.get("repeats", 5)):
            t = time.perf_counter()
            y = batched_forward(weights, xd)
            if dev != "cpu":
                torch.cuda.synchronize()
            walls.append(time.perf_counter() - t)
        results[dev] = y.cpu()
        out[f"{dev}_ms"] = round(1000 * statistics.median(walls), 2)
    if "cuda:0" in results:
        out["max_abs_diff_cuda_vs_cpu"] = float((results["cuda:0"] - results["cpu"]).abs().max())
    return out


def onnx(args: dict) -> dict:
    """The exported file on onnxruntime's CUDA provider vs the PyTorch model (the export's own check)."""
    import onnxruntime as ort

    from ldtm_core.learning.checkpoints import load_checkpoint
    from ldtm_core.learning.export import verify

    providers = ort.get_available_providers()
    if "CUDAExecutionProvider" not in providers:
        return {"cuda_provider": False, "providers": providers}
    ckpt = load_checkpoint(args["checkpoint"])
    data = Path(args["onnx"]).read_bytes()
    diff = verify(
        data,
        ckpt.model.eval(),
        ckpt.config.window,
        ckpt.config.input_size,
        providers=("CUDAExecutionProvider",),
    )
    return {"cuda_provider": True, "max_abs_diff": diff}


PROBES = {"env": env, "context": context, "concurrency": concurrency, "batched": batched, "onnx": onnx}

if __name__ == "__main__":
    name = sys.argv[1]
    arguments = json.loads(sys.argv[2]) if len(sys.argv) > 2 else {}
    print(json.dumps(PROBES[name](arguments)))
