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


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("gpu_check")
    env = {k: v for k, v in os.environ.items() if not k.startswith("LDTM_")}
    env["PYTHON"] = sys.executable  # the suite's interpreter, with every dependency installed
    proc = subprocess.run(
        ["bash", str(ROOT / "scripts" / "gpu_check.sh"), "--cpu", "--out", str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    return proc, out


def test_every_stage_runs_or_says_why_not(dry_run):
    proc, out = dry_run
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads((out / "gpu_check.json").read_text())
    status = {s["name"]: (s["status"], s["note"]) for s in report["stages"]}
    expected = ["environment", "ingest", "slots", "context", "concurrency", "retrain", "predict"]
    expected += ["batched", "onnx", "bench", "recipes"]
    assert all(status[name][0] == "ok" for name in expected), status
    assert status["tensorrt"] == ("skipped", "TensorRT is not installed on this host (no trtexec)")
    assert report["total_s"] < report["budget_s"]


def test_the_figures_come_from_the_real_commands(dry_run):
    _proc, out = dry_run
    stages = {s["name"]: s["result"] for s in json.loads((out / "gpu_check.json").read_text())["stages"]}
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
    markdown = (out / "gpu_check.md").read_text()
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
