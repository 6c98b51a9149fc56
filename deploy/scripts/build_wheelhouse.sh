#!/usr/bin/env bash
# Wheels for the two images, built on the host (containers here reach no package index): the project's
# dependencies, the CPU torch ($TORCH_SPEC), and setuptools to build the project itself offline.
# The webserver/daemon image's packages (dagster, dagster-webserver, -graphql, -postgres, -docker) are
# among the project's dependencies. Cached by the hash of pyproject.toml and the torch spec; prints the
# wheelhouse directory on stdout.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
PYTHON=${PYTHON:-python3}

inputs=$( (cat "$REPO_ROOT/pyproject.toml"; echo "$TORCH_SPEC setuptools>=68 wheel dagster-graphql v1") | sha256sum | cut -c1-16)
wheelhouse=$LDTM_DEPLOY_CACHE/wheelhouse-$inputs
if [[ -f $wheelhouse/.complete ]]; then
    log "wheelhouse up to date: $wheelhouse"
    echo "$wheelhouse"
    exit 0
fi
log "building the wheelhouse $wheelhouse"
rm -rf "$wheelhouse.tmp"
"$PYTHON" -m pip wheel -q --wheel-dir "$wheelhouse.tmp" "$TORCH_SPEC" "setuptools>=68" wheel dagster-graphql \
    "$REPO_ROOT" >"$LDTM_DEPLOY_CACHE/wheelhouse.log" 2>&1 || { tail -20 "$LDTM_DEPLOY_CACHE/wheelhouse.log" >&2; exit 1; }
# The project itself is installed from the build context (its code changes more often than its dependencies).
rm -f "$wheelhouse.tmp"/ldtm-*.whl
touch "$wheelhouse.tmp/.complete"
rm -rf "$wheelhouse"
mv "$wheelhouse.tmp" "$wheelhouse"
log "wheelhouse: $(ls "$wheelhouse" | wc -l) wheels, $(du -sh "$wheelhouse" | cut -f1)"
echo "$wheelhouse"
