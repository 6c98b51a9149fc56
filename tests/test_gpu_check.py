"""scripts/gpu_check.sh --cpu: the GPU check's dry run (fake NVML, 3 tickers, CPU), so the check a GPU
host runs cannot rot between the times one is lent (issue 44)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _dry_run(out: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LDTM_")}
    env["PYTHON"] = sys.executable  # the suite's interpreter, with every dependency installed
    return subprocess.run(
        ["bash", str(ROOT / "scripts" / "gpu_check.sh"), "--cpu", "--out", str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


# One test for the one dry run (about 100 s on 2 cores): split in two, the suite's workers could each run it.
@pytest.mark.slow
def test_every_stage_runs_or_says_why_not_with_figures_from_the_real_commands(tmp_path):
    proc = _dry_run(tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    status = {s["name"]: (s["status"], s["note"]) for s in report["stages"]}
    expected = ["environment", "ingest", "slots", "context", "concurrency", "retrain", "predict"]
    expected += ["batched", "onnx", "bench", "recipes"]
    assert all(status[name][0] == "ok" for name in expected), status
    assert status["tensorrt"] == ("skipped", "TensorRT is not installed on this host (no trtexec)")
    assert report["total_s"] < report["budget_s"]

    # The figures come from the real commands.
    stages = {s["name"]: s["result"] for s in report["stages"]}
    # The fake card (15,000 MiB free) allows 23 slots; the cores cap them.
    assert stages["slots"]["gpus"][0]["name"] == "Fake GPU (gpu_check --cpu)"
    assert stages["slots"]["plan_total"] == min(23, os.cpu_count())
    assert stages["retrain"]["trained"] == 3 and stages["retrain"]["devices"] == ["cpu"]
    assert stages["predict"]["rows"] == 3 * (1 + 3)  # one evening and three replayed, three tickers
    assert stages["batched"]["models"] == 3 and stages["batched"]["cpu_ms"] > 0
    assert stages["onnx"]["cuda_provider"] is False  # the CPU build of onnxruntime
    # The recipes' GPU paths, as the CPU dry run runs them: each fit registers a candidate per ticker.
    assert stages["recipes"]["global_lstm_cpu"]["trained"] == 3, stages["recipes"]
    assert stages["recipes"]["lightgbm_cpu"]["trained"] == 3, stages["recipes"]
    cells = {(c["batch_size"], c["precision"]) for c in stages["bench"]["cells"]}
    assert cells == {(32, "fp32"), (32, "bf16"), (64, "fp32"), (64, "bf16")}
    markdown = (tmp_path / "gpu_check.md").read_text()
    assert "| 3-ticker retrain, demo profile, wall |" in markdown and "| tensorrt | skipped |" in markdown


def test_a_host_without_the_dependencies_or_wheels_is_told_how_to_get_them(tmp_path):
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    (repo / "scripts" / "gpu_check.sh").write_text((ROOT / "scripts" / "gpu_check.sh").read_text())
    # A bare interpreter (no sqlalchemy, no torch) and no .gpu_wheels/ beside the script.
    proc = subprocess.run(
        ["bash", str(repo / "scripts" / "gpu_check.sh"), "--cpu"],
        env={
            **os.environ,
            "PYTHON": "/usr/bin/python3" if Path("/usr/bin/python3").exists() else "python3",
            "PYTHONPATH": "",
        },
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "make gpu-wheels" in proc.stderr


def _check(tmp_path, monkeypatch, cpu: bool):
    monkeypatch.syspath_prepend(str(ROOT))
    monkeypatch.setenv("LDTM_GPU_POOL_ID", "")  # the check sets it: restored after the test
    from benchmarks import gpu_check

    cfg = gpu_check.CheckConfig.dry_run() if cpu else gpu_check.CheckConfig()
    return gpu_check, gpu_check.Check(cfg, tmp_path, tmp_path / "home")


def test_a_dry_run_on_a_busy_host_stretches_its_limits_and_says_host_too_busy(tmp_path, monkeypatch):
    """A busy 2-core host ran the dry run's concurrency and bench stages past their 80 s and 90 s limits
    ("failed: concurrency, bench"; 137 s in all when idle): a dry run's limits stretch with the host's
    measured slowness, and a stage that still runs out while the load exceeds the cores is "host too
    busy", not a failure of the check."""
    gpu_check, check = _check(tmp_path, monkeypatch, cpu=True)
    monkeypatch.setattr(gpu_check, "host_slowness", lambda: (3.0, "a fixed loop ran 3.0x its idle time"))
    monkeypatch.setattr(check, "write", lambda: {})
    given = []
    st = check.stage("bench", lambda lim: given.append(lim) or {"ok": 1}, 90)
    assert given == [270.0] and st.status == "ok" and st.result["limit_scale"].startswith("x3.0")
    assert check.budget_s == 3 * gpu_check.BUDGET_S

    def too_slow(lim):
        raise subprocess.TimeoutExpired("bench", lim)

    check.sampler.load["concurrency"] = 2.0 * (os.cpu_count() or 1) + 1
    st = check.stage("concurrency", too_slow, 80)
    assert st.status == "skipped" and st.note.startswith("host too busy: did not finish within 240s"), st.note
    check.sampler.load["onnx"] = 0.0  # idle, and still too slow: the check's own failure
    assert check.stage("onnx", too_slow, 60).status == "failed"


def test_a_gpu_hosts_limits_are_the_budgets_as_set(tmp_path, monkeypatch):
    gpu_check, check = _check(tmp_path, monkeypatch, cpu=False)
    monkeypatch.setattr(gpu_check, "host_slowness", lambda: (3.0, "busy"))
    monkeypatch.setattr(check, "write", lambda: {})
    given = []
    check.stage("bench", lambda lim: given.append(lim), 90)
    assert given == [90] and check.budget_s == gpu_check.BUDGET_S
