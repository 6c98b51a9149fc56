#!/usr/bin/env bash
# Wheels for the two images, downloaded on the host (containers here reach no package index) for the
# IMAGE's Python, not the host's: the interpreter version, ABI and platform tags are read from
# $LDTM_BASE_IMAGE's own python3 (docker run, no network) and passed to `pip download`
# (--python-version / --implementation / --abi / --platform, --only-binary=:all:), so a Python 3.12 or
# 3.13 host builds the wheelhouse of a Python 3.11 image. torch ($TORCH_SPEC) comes from $TORCH_INDEX
# (pytorch's CPU index by default; wheels in pip's configured find-links count too), the rest from the
# configured package index; a CPU wheelhouse holding CUDA wheels (nvidia_*, triton) is refused.
# Then the image's own pip resolves the requirements offline against the wheelhouse (markers evaluated
# for the image's Python, which the host's pip cannot do) and anything missing is downloaded too.
# The webserver/daemon image's packages are among the project's dependencies (plus dagster-graphql).
# Cached by the hash of pyproject.toml, the torch spec and index and the image's tags.
# Usage: build_wheelhouse.sh [--dry-run]
#   prints the wheelhouse directory on stdout; --dry-run prints the target, the cache key and the pip
#   commands instead, and downloads nothing.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
PYTHON=${PYTHON:-python3}
TORCH_INDEX=${TORCH_INDEX:-https://download.pytorch.org/whl/cpu}
dry_run=false
[[ ${1:-} == --dry-run ]] && dry_run=true

# The image's interpreter: "X.Y cpXY platform..." (its compatible platforms, best first).
PROBE='
import sys
try:
    from pip._vendor.packaging import tags
except ImportError:
    from packaging import tags
v = sys.version_info
interp = "cp%d%d" % v[:2]
plats = []
for t in tags.sys_tags():
    if t.interpreter == interp and t.abi == interp and t.platform not in plats:
        plats.append(t.platform)
print("%d.%d" % v[:2], interp, *plats)
'
target=$(docker run --rm --network none --entrypoint python3 "$LDTM_BASE_IMAGE" -c "$PROBE") ||
    die "could not read the Python of the image $LDTM_BASE_IMAGE (build it first: deploy/scripts/build_base_image.sh)"
read -r py_version abi platforms <<<"$target"
[[ $py_version =~ ^3\.[0-9]+$ && -n ${platforms:-} ]] ||
    die "unexpected answer from $LDTM_BASE_IMAGE's python3: '$target'"
target_flags=(--only-binary=:all: --python-version "$py_version" --implementation cp --abi "$abi")
for p in $platforms; do target_flags+=(--platform "$p"); done

# The project's dependencies, read from pyproject.toml (tomllib; a plain parse on Python < 3.11).
requirements=$("$PYTHON" - "$REPO_ROOT/pyproject.toml" <<'PY'
import re, sys
text = open(sys.argv[1], encoding="utf-8").read()
try:
    import tomllib
    deps = tomllib.loads(text)["project"]["dependencies"]
except ImportError:
    block = re.search(r"^dependencies = \[(.*?)^\]", text, re.S | re.M).group(1)
    deps = re.findall(r'^\s*"([^"]+)"', block, re.M)
print("\n".join(d for d in deps if not re.match(r"torch\b", d)))
PY
)
extras=("setuptools>=68" wheel dagster-graphql)

inputs=$( (cat "$REPO_ROOT/pyproject.toml"; echo "$TORCH_SPEC $TORCH_INDEX ${extras[*]} $target v2") | sha256sum | cut -c1-16)
wheelhouse=$LDTM_DEPLOY_CACHE/wheelhouse-py$py_version-$inputs
if $dry_run; then
    cat <<EOF
image: $LDTM_BASE_IMAGE
image python: $py_version $abi
host python: $("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
cache key: $inputs
wheelhouse: $wheelhouse
torch: $PYTHON -m pip download --no-deps --index-url $TORCH_INDEX ${target_flags[*]} $TORCH_SPEC
rest: $PYTHON -m pip download ${target_flags[*]} <torch wheel> ${extras[*]} $(tr "\n" " " <<<"$requirements")
EOF
    exit 0
fi
if [[ -f $wheelhouse/.complete ]]; then
    log "wheelhouse up to date: $wheelhouse"
    echo "$wheelhouse"
    exit 0
fi

log "building the wheelhouse $wheelhouse for $LDTM_BASE_IMAGE's Python $py_version (host $PYTHON: $("$PYTHON" -V 2>&1))"
tmp=$wheelhouse.tmp
rm -rf "$tmp"
mkdir -p "$tmp"
wlog=$LDTM_DEPLOY_CACHE/wheelhouse.log
: >"$wlog"
pip_download() { "$PYTHON" -m pip download --dest "$tmp" "${target_flags[@]}" "$@" >>"$wlog" 2>&1; }

# torch alone from its index: only torch's page is asked of it (an unreachable index costs retries per page).
pip_download --no-deps --index-url "$TORCH_INDEX" "$TORCH_SPEC" ||
    { tail -20 "$wlog" >&2; die "could not download $TORCH_SPEC for Python $py_version from $TORCH_INDEX (log: $wlog)"; }
torch_wheel=$(ls "$tmp"/torch-*.whl)
printf '%s\n' "$requirements" >"$tmp/requirements.txt"
pip_download "$torch_wheel" "${extras[@]}" -r "$tmp/requirements.txt" ||
    { tail -20 "$wlog" >&2; die "could not download the dependencies for Python $py_version (log: $wlog)"; }

if [[ $TORCH_INDEX == */cpu ]]; then
    cuda=()
    for whl in "$tmp"/nvidia_*.whl "$tmp"/triton-*.whl; do
        # nvidia_ml_py is the NVML bindings (a dependency of the project), not a CUDA runtime.
        [[ -e $whl && $(basename "$whl") != nvidia_ml_py-* ]] && cuda+=("$(basename "$whl")")
    done
    ((${#cuda[@]} == 0)) || die "a CPU wheelhouse got CUDA wheels (${cuda[*]}): torch came from $torch_wheel"
fi

# The image's pip resolves everything offline from the wheelhouse; a dependency that the host's pip left
# out (an environment marker evaluated for the host's Python) is named and downloaded, up to 5 rounds.
for round in 1 2 3 4 5; do
    if out=$(docker run --rm --network none -v "$tmp":/wheels:ro --entrypoint sh "$LDTM_BASE_IMAGE" -c \
        'python3 -m venv /tmp/v && /tmp/v/bin/pip install -q --dry-run --no-index --find-links /wheels \
         /wheels/torch-*.whl "$@" -r /wheels/requirements.txt' sh "${extras[@]}" 2>&1); then
        break
    fi
    missing=$(sed -n 's/.*No matching distribution found for \([^ ]*\).*/\1/p' <<<"$out" | head -1)
    if [[ -z $missing || $round == 5 ]]; then
        echo "$out" | tail -20 >&2
        die "the image's pip cannot install from the wheelhouse $tmp"
    fi
    log "the image's Python $py_version also needs $missing (an environment marker the host evaluated); downloading"
    pip_download "$missing" || { tail -20 "$wlog" >&2; die "could not download $missing (log: $wlog)"; }
done

# The project itself is installed from the build context (its code changes more often than its dependencies).
rm -f "$tmp"/ldtm-*.whl "$tmp/requirements.txt"
touch "$tmp/.complete"
rm -rf "$wheelhouse"
mv "$tmp" "$wheelhouse"
log "wheelhouse: $(ls "$wheelhouse" | wc -l) wheels, $(du -sh "$wheelhouse" | cut -f1), tags for Python $py_version"
echo "$wheelhouse"
