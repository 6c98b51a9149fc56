#!/usr/bin/env bash
# Create .venv and install LDTM. On a machine without an NVIDIA driver, torch comes as the CPU
# build (torch==2.13.0) instead of the multi-GB CUDA one an unpinned install would pull.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
if ! .venv/bin/python -c "import torch" 2>/dev/null; then
    if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
        .venv/bin/python -m pip install -q "torch==2.13.0"
    else
        # The CPU index carries the same version without CUDA; a local wheel of it satisfies this too.
        .venv/bin/python -m pip install -q "torch==2.13.0" --timeout 10 --retries 0 \
            --extra-index-url https://download.pytorch.org/whl/cpu
    fi
fi
.venv/bin/python -m pip install -q -e ".[dev]"
