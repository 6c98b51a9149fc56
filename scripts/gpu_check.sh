#!/usr/bin/env bash
# The GPU check (benchmarks/gpu_check.py; docs/operations.md, "Checking a GPU host"):
#
#   scripts/gpu_check.sh [--out DIR]    # on a GPU host: the CUDA path end to end, ~8 min, JSON + Markdown
#   scripts/gpu_check.sh --cpu          # the dry run on a CPU (fake NVML, 3 tickers); the suite runs it
#
# On an air-gapped host whose Python lacks the project's dependencies, they are installed from the
# wheels `make gpu-wheels` downloaded into .gpu_wheels/ (into a temp folder on PYTHONPATH: the host's
# own packages are left as they are).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] && [ -z "${PYTHON:-}" ] && PY=.venv/bin/python
NEEDS="import sqlalchemy, alembic, exchange_calendars, optuna, arch, typer, rich, torch, onnx, onnxruntime"
if ! "$PY" -c "$NEEDS" 2>/dev/null; then
    if ! ls .gpu_wheels/*.whl >/dev/null 2>&1; then
        echo "error: $PY lacks the project's dependencies and .gpu_wheels/ holds no wheels:" >&2
        echo "       run 'make gpu-wheels' where PyPI answers, then bring .gpu_wheels/ along" >&2
        exit 2
    fi
    site=$(mktemp -d /tmp/ldtm_gpu_site.XXXXXX)
    "$PY" -m pip install -q --no-index --no-deps --no-compile --target "$site" .gpu_wheels/*.whl
    export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
    "$PY" -c "$NEEDS" || { echo "error: still missing a dependency after installing .gpu_wheels/" >&2; exit 2; }
fi
exec "$PY" benchmarks/gpu_check.py "$@"
