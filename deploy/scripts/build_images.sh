#!/usr/bin/env bash
# Offline build of everything the compose stack runs, for hosts that reach no registry or package index:
# the debootstrap base, the PostgreSQL stand-in, the wheelhouse (linked into deploy/wheelhouse, the
# Dockerfiles' default WHEELHOUSE), then the user-code and webserver/daemon images through compose.
# Cached under $LDTM_DEPLOY_CACHE; Docker's layer cache skips unchanged image steps.
# Extra arguments go to the compose command (e.g. --env-file FILE).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
"$(dirname "$0")/build_postgres_image.sh"
wheelhouse=$("$(dirname "$0")/build_wheelhouse.sh")

target=$REPO_ROOT/deploy/wheelhouse
find "$target" -maxdepth 1 \( -name '*.whl' -o -name '*.tar.gz' \) -delete
# Hard links where the cache shares the repository's filesystem, else copies.
cp -l "$wheelhouse"/*.whl "$target"/ 2>/dev/null || cp "$wheelhouse"/*.whl "$target"/

log "building ldtm_user_code_image and ldtm_dagster_image on $LDTM_BASE_IMAGE"
cd "$REPO_ROOT"
LDTM_BASE_IMAGE=$LDTM_BASE_IMAGE LDTM_POSTGRES_IMAGE=$LDTM_POSTGRES_IMAGE $(compose_cmd) "$@" build \
    ldtm_user_code ldtm_webserver >"$LDTM_DEPLOY_CACHE/build.log" 2>&1 || { tail -40 "$LDTM_DEPLOY_CACHE/build.log"; exit 1; }
log "images built"
