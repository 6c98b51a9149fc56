"""The GPU check (issue 44): the product's CUDA path on one GPU host, end to end, in about 8 minutes.

    scripts/gpu_check.sh [--out DIR]      # on the GPU host (installs the wheels of `make gpu-wheels` first)
    scripts/gpu_check.sh --cpu            # the dry run: CPU, a fake NVML, a few tickers (the suite runs it)

On the embedded default (SQLite under a throw-away LDTM_HOME, synthetic prices) it runs, each stage as the
`ldtm` command a user would type or as one probe process (gpu_probes.py), every one within its own time
limit so that one stage failing or hanging costs only itself:

environment  versions, the card, driver, CPU (gpu_probes env)
ingest       20 years of synthetic prices for the 103 tickers (`ldtm ingest synthetic`)
slots        NVML's view and the slot plan derived from it (`ldtm gpu slots`)
context      CUDA context cost, one training step per precision (gpu_probes context)
concurrency  1, 4, 16 processes training on the card at once (gpu_probes concurrency)
retrain      all tickers, reference profile, through the slot plan: one worker per slot pinned to the
             card, `amp=auto` (`ldtm train --tickers all`); with --every-slot once more with every slot
             the VRAM allows (the plan before issue 44: 236 workers asked on an H200), side by side
predict      one evening for all tickers, then 20 replayed evenings (`ldtm predict`)
batched      the batched forward on the card vs the CPU (gpu_probes batched)
onnx         one model exported (`ldtm export onnx`), then on onnxruntime's CUDA provider (gpu_probes onnx)
bench        `ldtm bench train --device cuda` at batch 32/128/512 x fp32/bf16/fp16
recipes      the global recipes' GPU paths: `global_lstm` fitted on the card (`--set device=cuda`), then
             LightGBM's OpenCL learner (`--set device=gpu`), each `ldtm train --tickers all --recipe R`
tensorrt     scripts/build_tensorrt.sh, where trtexec exists

Throughout, a sampler reads NVML every 0.25 s: each process's peak GPU memory and the slot plan
re-derived from the card under the pool's own load. Everything goes to gpu_check.json and
gpu_check.md in --out, with the time each stage took against the 8-minute budget.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ldtm_core.learning.gpu_slots import ENV_POOL_ID, GpuMemory, plan_slots, probe  # noqa: E402

FAKE_NVML = ROOT / "benchmarks" / "fake_nvml"
BUDGET_S = 480  # the 8 minutes on one H100
# The dry run's limits only stop a hang: on a slow or busy host they stretch by the host's measured
# slowness (a fixed loop against its time on the idle reference CPU, and the load per core), up to 6x.
CALIBRATION_S = 0.175  # _spin() on the idle reference host (AMD EPYC Zen 3, 2 cores)
MAX_SCALE = 6.0


@dataclass
class CheckConfig:
    cpu: bool = False
    tickers: int = 103
    years: int = 20
    profile: str = "reference"
    replay: int = 20
    concurrency: tuple[int, ...] = (1, 4, 16)
    concurrency_s: float = 6.0
    bench_batches: str = "32,128,512"
    bench_precisions: str = "fp32,bf16,fp16"
    bench_samples: int = 4000
    bench_epochs: int = 2
    every_slot: bool = False  # also retrain with every slot the VRAM allows (the plan before issue 44)
    only: tuple[str, ...] = ()  # run just these stages (a rerun after a fix); () = all

    @classmethod
    def dry_run(cls) -> CheckConfig:
        """The CPU dry run: every stage, a few tickers, minutes of CI at most."""
        return cls(
            cpu=True,
            tickers=3,
            years=3,
            profile="demo",
            replay=3,
            concurrency=(1, 2),
            concurrency_s=1.0,
            bench_batches="32,64",
            bench_precisions="fp32,bf16",
            bench_samples=256,
            bench_epochs=1,
        )


@dataclass
class Stage:
    name: str
    status: str = "ok"  # ok | failed | skipped
    wall_s: float = 0.0
    result: dict = field(default_factory=dict)
    note: str = ""


class Sampler(threading.Thread):
    """NVML every `period` s: peak GPU memory per process and stage, and the slot plan under load."""

    def __init__(self, period: float = 0.25):
        super().__init__(daemon=True)
        self.period, self.stage = period, "start"
        self.peaks: dict[str, dict[int, float]] = {}  # stage -> pid -> peak MiB
        self.used: dict[str, float] = {}  # stage -> peak card memory in use (all processes)
        self.plans: dict[str, list[tuple[int, int]]] = {}  # stage -> [(own-aware total, free-only total)]
        self.host: dict[str, float] = {}  # stage -> peak host memory in use, GiB
        self.load: dict[str, float] = {}  # stage -> peak 1-minute load average
        self.stop = threading.Event()

    def run(self) -> None:
        try:
            import pynvml as nvml
        except ImportError:
            nvml = None
        last_plan = 0.0
        while not self.stop.wait(self.period):
            stage = self.stage
            self.load[stage] = max(self.load.get(stage, 0.0), os.getloadavg()[0])
            with contextlib.suppress(Exception):
                import psutil

                self.host[stage] = max(self.host.get(stage, 0.0), psutil.virtual_memory().used / 2**30)
            if nvml is None:
                continue
            try:
                nvml.nvmlInit()
                for i in range(nvml.nvmlDeviceGetCount()):
                    h = nvml.nvmlDeviceGetHandleByIndex(i)
                    used = nvml.nvmlDeviceGetMemoryInfo(h).used / 2**20
                    self.used[stage] = max(self.used.get(stage, 0.0), used)
                    for p in nvml.nvmlDeviceGetComputeRunningProcesses(h):
                        if p.usedGpuMemory is not None:
                            peaks = self.peaks.setdefault(stage, {})
                            peaks[p.pid] = max(peaks.get(p.pid, 0.0), p.usedGpuMemory / 2**20)
                nvml.nvmlShutdown()
            except Exception:  # noqa: BLE001, S112 - a missed sample is not a failure of the check
                continue
            if time.monotonic() - last_plan >= 1.0:
                last_plan = time.monotonic()
                gpus = probe()
                own_aware = plan_slots(gpus).total
                free_only = plan_slots([replace(g, own_mib=0) for g in gpus]).total
                self.plans.setdefault(stage, []).append((own_aware, free_only))

    def summary(self, stage: str) -> dict:
        peaks = sorted(self.peaks.get(stage, {}).values())
        plans = self.plans.get(stage, [])
        out: dict = {
            "gpu_processes": len(peaks),
            "card_used_peak_mib": round(self.used.get(stage, 0.0)),
            "host_used_peak_gib": round(self.host.get(stage, 0.0), 1),
        }
        if peaks:
            out.update(
                process_peak_mib_median=round(statistics.median(peaks)), process_peak_mib_max=round(peaks[-1])
            )
        if plans:
            out.update(
                plan_own_aware=[min(p[0] for p in plans), max(p[0] for p in plans)],
                plan_free_only=[min(p[1] for p in plans), max(p[1] for p in plans)],
            )
        return out


def _spin() -> None:
    sum(i * i for i in range(3_000_000))


def host_slowness() -> tuple[float, str]:
    """(how many times slower than the idle reference this host runs now, why), at least 1."""
    t = time.perf_counter()
    _spin()
    calibration = (time.perf_counter() - t) / CALIBRATION_S
    cores, load = os.cpu_count() or 1, os.getloadavg()[0]
    # The load counts the other processes wanting a core; the stage's own process is the +1.
    scale = min(MAX_SCALE, max(1.0, calibration, (load + 1) / cores))
    return scale, f"a fixed loop ran {calibration:.1f}x its idle time, load {load:.1f} on {cores} cores"


class Check:
    def __init__(self, cfg: CheckConfig, out: Path, home: Path):
        self.cfg, self.out, self.home = cfg, out, home
        self.budget_s = float(BUDGET_S)  # a dry run's stretches with the host's slowness
        self.stages: list[Stage] = []
        self.amp = "auto"
        self.t0 = time.monotonic()
        self.sampler = Sampler()
        self.env = {
            **os.environ,
            "LDTM_HOME": str(home),
            "LDTM_DATABASE_URL": f"sqlite:///{home / 'ldtm.db'}",
            "LDTM_UNIVERSE": "full" if cfg.tickers >= 103 else ",".join(self._universe()[: cfg.tickers]),
            "LDTM_CACHE_DIR": str(home / "cache"),
            ENV_POOL_ID: f"gpu-check@{home}",
            "PYTHONPATH": os.pathsep.join(
                [*([str(FAKE_NVML)] if cfg.cpu else []), str(ROOT), os.environ.get("PYTHONPATH", "")]
            ),
            "COLUMNS": "200",
            "PYTHONUNBUFFERED": "1",
        }
        if cfg.cpu:
            self.env["LDTM_BF16_PROBE"] = "0"
        os.environ[ENV_POOL_ID] = self.env[ENV_POOL_ID]  # the sampler's plan counts the pool's own jobs

    @staticmethod
    def _universe() -> list[str]:
        from ldtm_core.data.universe import load_universe

        return load_universe("full")

    # -- running stages ------------------------------------------------------------------------------

    def left(self) -> float:
        return self.budget_s - (time.monotonic() - self.t0)

    def stage(self, name: str, fn, limit_s: float, *args) -> Stage:
        st = Stage(name)
        if self.cfg.only and name not in self.cfg.only:
            return st
        self.current = st  # a stage writes its figures into st.result as it goes: a timeout keeps them
        self.sampler.stage = name
        if self.cfg.cpu:  # a dry run's limits stop hangs only: a busy or slow host stretches them
            scale, why = host_slowness()
            limit_s *= scale
            self.budget_s = max(self.budget_s, BUDGET_S * scale)
            st.result["limit_scale"] = f"x{scale:.1f}: {why}"
        t = time.monotonic()
        print(f"== {name} (limit {limit_s:.0f}s, {self.left():.0f}s of the budget left)", flush=True)
        try:
            st.result.update(fn(limit_s, *args) or {})
        except subprocess.TimeoutExpired:
            st.status, st.note = "failed", f"did not finish within {limit_s:.0f}s"
            load, cores = self.sampler.load.get(name, 0.0), os.cpu_count() or 1
            if self.cfg.cpu and load > cores:  # the host, not the check: said so, not a failure
                st.status = "skipped"
                st.note = (
                    f"host too busy: did not finish within {limit_s:.0f}s at a load of {load:.1f} on "
                    f"{cores} cores; run the dry run again on an idle host"
                )
        except Skip as why:
            st.status, st.note = "skipped", str(why)
        except Exception as exc:  # noqa: BLE001 - one stage's failure is recorded, the others still run
            st.status, st.note = "failed", f"{type(exc).__name__}: {str(exc).strip()[-600:]}"
        st.wall_s = round(time.monotonic() - t, 1)
        st.result.update(self.sampler.summary(name))
        print(f"   {st.status} in {st.wall_s}s {st.note}", flush=True)
        self.stages.append(st)
        self.write()  # after every stage: a host that dies mid-check still leaves what it measured
        return st

    def run(self, cmd: list[str], limit_s: float) -> subprocess.CompletedProcess:
        """A command in its own process group; the group is killed when the limit passes."""
        proc = subprocess.Popen(
            cmd,
            env=self.env,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        try:
            output, _ = proc.communicate(timeout=limit_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.communicate()
            raise
        (self.out / "logs").mkdir(exist_ok=True)
        with open(self.out / "logs" / "commands.log", "a") as log:
            log.write(f"$ {' '.join(cmd)}\n{output}\n")
        if proc.returncode != 0:
            raise RuntimeError(f"exit {proc.returncode}: {output.strip()[-600:]}")
        return subprocess.CompletedProcess(cmd, proc.returncode, output)

    def ldtm(self, limit_s: float, *args: str) -> str:
        return self.run([sys.executable, "-m", "ldtm_core", *args], limit_s).stdout

    def probe(self, limit_s: float, name: str, **kw) -> dict:
        out = self.run(
            [sys.executable, str(ROOT / "benchmarks" / "gpu_probes.py"), name, json.dumps(kw)], limit_s
        )
        return json.loads(out.stdout.strip().splitlines()[-1])

    # -- the stages ----------------------------------------------------------------------------------

    def ingest(self, limit_s: float) -> dict:
        end = self.last_session()
        start = end.replace(year=end.year - self.cfg.years)
        self.ldtm(limit_s, "ingest", "synthetic", "--start", start.isoformat(), "--end", end.isoformat())
        return {"tickers": self.cfg.tickers, "start": start.isoformat(), "end": end.isoformat()}

    def slots(self, limit_s: float) -> dict:
        text = self.ldtm(limit_s, "gpu", "slots")
        gpus = probe()
        plan = plan_slots(gpus)
        return {
            "gpus": [asdict(g) for g in gpus],
            "plan_total": plan.total,
            "plan_kind": plan.kind,
            "plan_reason": plan.reason,
            "ldtm_gpu_slots": text.strip().splitlines()[-1],
        }

    def retrain(self, limit_s: float, workers: int | None) -> dict:
        first_id = self.max_model_id() + 1
        args = ["train", "--tickers", "all", "--profile", self.cfg.profile]
        args += ["--set", f"amp={self.amp}"] if self.amp != "auto" else []
        t = time.monotonic()
        try:
            self.ldtm(limit_s, *args, *(["--workers", str(workers)] if workers else []))
        finally:  # what was trained before a timeout or a failure is still reported
            self.current.result.update(self.trained_since(first_id, time.monotonic() - t, workers))
        return {}

    def trained_since(self, first_id: int, wall: float, workers: int | None) -> dict:
        models = self.models_since(first_id)
        durations = sorted(m["duration_s"] for m in models)
        out = {
            "amp": self.amp,
            "workers": workers or f"the plan's {self.plan_total()}",
            "trained": len(models),
            "wall_s": round(wall, 1),
            "devices": sorted({m["device"] for m in models}),
            "precision": sorted({m["precision"] for m in models}),
        }
        if durations:
            out.update(
                per_ticker_median_s=round(statistics.median(durations), 2),
                per_ticker_max_s=round(durations[-1], 2),
                epochs_median=statistics.median(m["epochs"] for m in models),
            )
        return out

    def predict(self, limit_s: float) -> dict:
        from ldtm_core.data.calendar import sessions_between

        end = self.last_session()
        sessions = sessions_between(end - dt.timedelta(days=3 * self.cfg.replay + 10), end)
        replay = sessions[-self.cfg.replay - 1 : -1]
        t = time.monotonic()
        self.ldtm(limit_s, "predict", "--run-date", end.isoformat())
        self.current.result["one_evening_s"] = round(time.monotonic() - t, 2)
        t = time.monotonic()
        self.ldtm(limit_s, "predict", "--start", replay[0].isoformat(), "--end", replay[-1].isoformat())
        return {
            "replay_evenings": len(replay),
            "replay_s": round(time.monotonic() - t, 2),
            "rows": self.count_snapshots(),
        }

    def onnx(self, limit_s: float) -> dict:
        ticker = self.env["LDTM_UNIVERSE"].split(",")[0] if self.cfg.tickers < 103 else "AAPL"
        path = self.home / f"{ticker}.onnx"
        text = self.ldtm(limit_s, "export", "onnx", "--ticker", ticker, "--candidate", "--out", str(path))
        result = {"ticker": ticker, "export": text.strip().splitlines()[0]}
        ckpt = self.models_since(0, ticker=ticker)[-1]["checkpoint_path"]
        result.update(self.probe(limit_s, "onnx", onnx=str(path), checkpoint=ckpt))
        self.onnx_path = path
        return result

    def bench(self, limit_s: float) -> dict:
        path = self.home / "bench.json"
        device = "cpu" if self.cfg.cpu else "cuda"
        self.ldtm(
            limit_s,
            "bench",
            "train",
            "--device",
            device,
            "--batch-sizes",
            self.cfg.bench_batches,
            "--precisions",
            self.cfg.bench_precisions,
            "--samples",
            str(self.cfg.bench_samples),
            "--epochs",
            str(self.cfg.bench_epochs),
            "--json",
            str(path),
        )
        return {"device": device, "cells": json.loads(path.read_text())}

    def recipes(self, limit_s: float) -> dict:
        """Each global recipe's GPU path as `ldtm train --tickers all --recipe R --set device=D` (on the
        dry run, the same commands with device=cpu). One that fails is recorded, the next still runs."""
        runs = [("global_lstm", "cuda"), ("lightgbm", "gpu")]
        for recipe, device in runs:
            device = "cpu" if self.cfg.cpu else device
            first, t = self.max_model_id() + 1, time.monotonic()
            args = ["train", "--tickers", "all", "--recipe", recipe, "--set", f"device={device}"]
            try:
                self.ldtm(limit_s / len(runs), *args)
                figures = {"trained": len(self.models_since(first))}
            except (RuntimeError, subprocess.TimeoutExpired) as exc:
                figures = {"error": str(exc).strip()[-300:]}
            self.current.result[f"{recipe}_{device}"] = {"wall_s": round(time.monotonic() - t, 1), **figures}
        return {}

    def tensorrt(self, limit_s: float) -> dict:
        onnx_path = getattr(self, "onnx_path", None)
        if onnx_path is None or not onnx_path.exists():
            raise Skip("no ONNX file (the onnx stage did not write one)")
        engine = self.home / "model.plan"
        proc = subprocess.run(
            ["bash", str(ROOT / "scripts" / "build_tensorrt.sh"), str(onnx_path), str(engine), "--fp16"],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=limit_s,
        )
        if proc.returncode == 3:
            raise Skip("TensorRT is not installed on this host (no trtexec)")
        if proc.returncode != 0:
            raise RuntimeError(f"exit {proc.returncode}: {(proc.stdout + proc.stderr)[-600:]}")
        return {"engine_bytes": engine.stat().st_size}

    # -- reading the store ---------------------------------------------------------------------------

    def engine(self):
        from ldtm_core.db import get_engine

        return get_engine(self.env["LDTM_DATABASE_URL"])

    def result_of(self, name: str) -> dict:
        """The figures a stage recorded ({} when it did not run)."""
        return next((s.result for s in self.stages if s.name == name), {})

    def plan_total(self):
        return self.result_of("slots").get("plan_total", "?")

    def max_model_id(self) -> int:
        from sqlalchemy import func, select

        from ldtm_core.schema import model_registry

        with self.engine().connect() as conn:
            return conn.execute(select(func.max(model_registry.c.id))).scalar() or 0

    def models_since(self, first_id: int, ticker: str | None = None) -> list[dict]:
        from sqlalchemy import select

        from ldtm_core.schema import model_registry as reg

        stmt = select(
            reg.c.ticker,
            reg.c.device,
            reg.c.duration_s,
            reg.c.epochs,
            reg.c.metrics_json,
            reg.c.checkpoint_path,
        )
        stmt = stmt.where(reg.c.id >= first_id).order_by(reg.c.id)
        if ticker:
            stmt = stmt.where(reg.c.ticker == ticker)
        with self.engine().connect() as conn:
            rows = [dict(r) for r in conn.execute(stmt).mappings()]
        for r in rows:
            r["precision"] = json.loads(r.pop("metrics_json") or "{}").get("precision", "?")
        return rows

    def count_snapshots(self) -> int:
        from sqlalchemy import func, select

        from ldtm_core.schema import snapshots

        with self.engine().connect() as conn:
            return conn.execute(select(func.count()).select_from(snapshots)).scalar()

    @staticmethod
    def last_session() -> dt.date:
        from ldtm_core.data.calendar import latest_closed_session

        return latest_closed_session()

    # -- the whole check -----------------------------------------------------------------------------

    def all(self) -> None:
        c = self.cfg
        self.sampler.start()
        self.stage("environment", lambda lim: self.probe(lim, "env"), 60)
        self.stage("ingest", self.ingest, 90)
        self.stage("slots", self.slots, 30)
        ctx = self.stage("context", lambda lim: self.probe(lim, "context"), 60).result
        self.amp = self.working_amp(ctx)
        self.stage(
            "concurrency",
            lambda lim: self.probe(
                lim, "concurrency", ks=list(c.concurrency), seconds=c.concurrency_s, batch=128
            ),
            60 + 10 * len(c.concurrency) * c.concurrency_s,
        )
        self.stage("retrain", self.retrain, 240, None)
        self.stage("predict", self.predict, 60)
        self.stage("batched", lambda lim: self.probe(lim, "batched"), 60)
        self.stage("onnx", self.onnx, 60)
        self.stage("bench", self.bench, 90)
        self.stage("recipes", self.within_budget(self.recipes, 120, reserve=60), 120)
        if c.every_slot:  # last of the heavy ones: on an H200 it took 105 of 126 GiB of host memory
            slots = self.result_of("slots")
            every = plan_slots([GpuMemory(**g) for g in slots.get("gpus", [])], cpu_slots=10**6).total
            self.stage("retrain_every_slot", self.within_budget(self.retrain, 150, reserve=10), 150, every)
        self.stage("tensorrt", self.within_budget(self.tensorrt, 60, reserve=0), 60)
        self.sampler.stop.set()

    def working_amp(self, ctx: dict) -> str:
        """`auto`, unless the context probe saw auto's precision fail a training step on this card: then
        the first that worked (the retrain says so in its figures; fixing it is the check's finding)."""
        steps = ctx.get("train_step", {})
        auto = ctx.get("auto_precision", "fp32")
        if "error" not in steps.get(auto, {}):
            return "auto"
        return next((p for p in ("fp16", "bf16") if "ms_per_step" in steps.get(p, {})), "off")

    def within_budget(self, fn, limit_s: float, reserve: float):
        """fn, unless what is left of the budget after it would not cover the stages after it."""

        def guarded(lim, *args):
            if self.left() - limit_s < reserve:
                raise Skip(
                    f"{self.left():.0f}s of the {self.budget_s:.0f}s budget left, {limit_s + reserve:.0f}s needed"
                )
            return fn(lim, *args)

        return guarded

    def write(self) -> dict:
        total = round(time.monotonic() - self.t0, 1)
        env = self.result_of("environment")
        report = {
            "when": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "mode": "cpu dry run" if self.cfg.cpu else "gpu",
            "config": asdict(self.cfg),
            "environment": env,
            "total_s": total,
            "budget_s": round(self.budget_s),
            "stages": [asdict(s) for s in self.stages],
        }
        (self.out / "gpu_check.json").write_text(json.dumps(report, indent=1, default=str))
        (self.out / "gpu_check.md").write_text(markdown(report))
        return report


class Skip(Exception):
    """A stage that does not apply here (no TensorRT, no budget left); recorded with its reason."""


def markdown(report: dict) -> str:
    from benchmarks.gpu_report import render

    return render(report)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cpu", action="store_true", help="the dry run: CPU, a fake NVML, a few tickers")
    ap.add_argument("--out", type=Path, default=ROOT / "gpu_check_out", help="where the JSON and Markdown go")
    ap.add_argument("--tickers", type=int, help="how many of the universe (default 103; --cpu 3)")
    ap.add_argument(
        "--only", help="comma list of stages to run, e.g. environment,ingest,slots,context,retrain"
    )
    ap.add_argument(
        "--every-slot", action="store_true", help="also retrain with every slot VRAM allows (minutes)"
    )
    ap.add_argument("--keep-home", action="store_true", help="keep the throw-away LDTM_HOME (prints it)")
    a = ap.parse_args(argv)
    if a.cpu:
        sys.path.insert(0, str(FAKE_NVML))  # this process's sampler and plan read the fake card too
    cfg = CheckConfig.dry_run() if a.cpu else CheckConfig()
    if a.tickers:
        cfg.tickers = a.tickers
    cfg.every_slot = a.every_slot
    cfg.only = tuple(x.strip() for x in (a.only or "").split(",") if x.strip())
    a.out.mkdir(parents=True, exist_ok=True)
    home = Path(tempfile.mkdtemp(prefix="ldtm_gpu_check_"))
    check = Check(cfg, a.out, home)
    try:
        check.all()
    finally:
        check.sampler.stop.set()
        report = check.write()
        if a.keep_home:
            print(f"LDTM_HOME kept: {home}")
        else:
            shutil.rmtree(home, ignore_errors=True)
    print((a.out / "gpu_check.md").read_text())
    failed = [s["name"] for s in report["stages"] if s["status"] == "failed"]
    print(
        f"total {report['total_s']}s of the {report['budget_s']}s budget; failed: {', '.join(failed) or 'none'}"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
