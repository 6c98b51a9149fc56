#!/usr/bin/env bash
# Build a TensorRT engine from an exported LDTM ONNX file (SPEC §11).
#
#   scripts/build_tensorrt.sh MODEL.onnx [ENGINE.plan] [--fp16] [--max-batch N]
#
# Needs `trtexec` (TensorRT) on PATH or in TRTEXEC / /usr/src/tensorrt/bin. Where TensorRT is
# absent it says so and exits 3; nothing is written. The engine is built to a temp file and
# renamed into place, so a failed build never leaves a half-written engine.
set -euo pipefail

usage() { echo "usage: $0 MODEL.onnx [ENGINE.plan] [--fp16] [--max-batch N]" >&2; exit 2; }

[[ $# -ge 1 ]] || usage
onnx="$1"; shift
engine=""
if [[ $# -ge 1 && "$1" != --* ]]; then engine="$1"; shift; fi
fp16=""
max_batch=1024
while [[ $# -gt 0 ]]; do
  case "$1" in
    --fp16) fp16="--fp16"; shift ;;
    --max-batch) [[ $# -ge 2 ]] || usage; max_batch="$2"; shift 2 ;;
    *) usage ;;
  esac
done
[[ "$max_batch" =~ ^[1-9][0-9]*$ ]] || { echo "error: --max-batch must be a positive integer, got '$max_batch'" >&2; exit 2; }
[[ -f "$onnx" ]] || { echo "error: ONNX file '$onnx' does not exist (run: ldtm export onnx --ticker T)" >&2; exit 2; }
engine="${engine:-${onnx%.onnx}.plan}"

trtexec="${TRTEXEC:-}"
if [[ -z "$trtexec" ]]; then
  trtexec="$(command -v trtexec || true)"
fi
if [[ -z "$trtexec" && -x /usr/src/tensorrt/bin/trtexec ]]; then
  trtexec=/usr/src/tensorrt/bin/trtexec
fi
if [[ -z "$trtexec" || ! -x "$trtexec" ]]; then
  echo "error: TensorRT is not installed on this machine (no 'trtexec' on PATH, in \$TRTEXEC or /usr/src/tensorrt/bin)." >&2
  echo "       No engine was built. The ONNX file '$onnx' runs anywhere with onnxruntime; build the engine on a machine with TensorRT." >&2
  exit 3
fi

# Shapes of the input 'x' [batch, window, features] come from the ONNX file itself.
dims="$(python3 - "$onnx" <<'PY'
import sys
import onnx
m = onnx.load(sys.argv[1])
d = m.graph.input[0].type.tensor_type.shape.dim
print(d[1].dim_value, d[2].dim_value)
PY
)"
read -r window features <<<"$dims"
tmp="$(dirname "$engine")/.tmp-$(basename "$engine").$$"
trap 'rm -f "$tmp"' EXIT
"$trtexec" --onnx="$onnx" --saveEngine="$tmp" $fp16 \
  --minShapes=x:1x${window}x${features} \
  --optShapes=x:128x${window}x${features} \
  --maxShapes=x:${max_batch}x${window}x${features}
mv -f "$tmp" "$engine"
trap - EXIT
echo "built TensorRT engine $engine from $onnx"
