#!/usr/bin/env bash
# Download, here where PyPI answers, the wheels an air-gapped GPU host lacks for the GPU check
# (scripts/gpu_check.sh): CPython 3.12, manylinux x86-64, into .gpu_wheels/ (git-ignored).
#
# The host already has torch (CUDA), numpy, pandas, scipy, statsmodels, scikit-learn, onnx, onnxruntime,
# nvidia-ml-py, typer, rich, filelock, pyyaml, psutil, tqdm, toolz, markupsafe and pytest. The core CLI
# on SQLite needs these besides: no Dagster, no PostgreSQL driver. Versions are the ones this project's
# .venv resolves today, so the check runs what the test suite ran.
set -euo pipefail
cd "$(dirname "$0")/.."
dest=.gpu_wheels
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] && PY=.venv/bin/python
WHEELS=(
    "sqlalchemy==2.1.9" "alembic==1.20.1" "mako==1.4.3"
    "exchange-calendars==4.13.2" "pyluach==2.3.0" "korean-lunar-calendar==0.4.0" "tzdata==2026.6"
    "optuna==5.0.0" "colorlog==6.12.0" "arch==8.0.0"
)
mkdir -p "$dest"
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d "$dest" "${WHEELS[@]}"
# The device tool carries at most 64 MiB of working tree and wheels together.
tree_kib=$(git ls-files -z | xargs -0 du -ck | tail -1 | cut -f1)
wheels_kib=$(du -sk "$dest" | cut -f1)
echo "wheels in $dest: $(ls "$dest" | wc -l) files, ${wheels_kib} KiB; with the tracked tree ${tree_kib} KiB:" \
    "$(( (tree_kib + wheels_kib) / 1024 )) MiB of 64 MiB"
[ $(( tree_kib + wheels_kib )) -le $(( 64 * 1024 )) ] || { echo "error: over the 64 MiB a GPU host takes" >&2; exit 1; }
