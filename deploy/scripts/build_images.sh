#!/usr/bin/env bash
# Offline build of everything the compose stack runs, for hosts that reach no image registry (the host
# itself needs Debian's and Python's package registries, root and debootstrap: install_prerequisites.sh):
# the debootstrap base, the PostgreSQL and nginx stand-ins, the wheelhouse for the base image's Python (linked into
# deploy/wheelhouse, the Dockerfiles' default WHEELHOUSE), then the user-code and webserver/daemon images
# through compose. Cached under $LDTM_DEPLOY_CACHE; Docker's layer cache skips unchanged image steps.
# Afterwards the newest builder stage of each Dockerfile is tagged (ldtm_user_code_builder:cache,
# ldtm_dagster_builder:cache: the venv's layer cache for the next build) and superseded builder stages,
# which the classic builder leaves as dangling images, are removed, as are the two images this build
# replaced (unless a container still uses them).
# Extra arguments go to the compose command (e.g. --env-file FILE); .env (or that file) must exist.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
"$(dirname "$0")/build_postgres_image.sh"
"$(dirname "$0")/build_proxy_image.sh"
wheelhouse=$("$(dirname "$0")/build_wheelhouse.sh")

target=$REPO_ROOT/deploy/wheelhouse
find "$target" -maxdepth 1 \( -name '*.whl' -o -name '*.tar.gz' \) -delete
# Hard links where the cache shares the repository's filesystem, else copies.
cp -l "$wheelhouse"/*.whl "$target"/ 2>/dev/null || cp "$wheelhouse"/*.whl "$target"/

log "building ldtm_user_code_image and ldtm_dagster_image on $LDTM_BASE_IMAGE"
cd "$REPO_ROOT"
replaced=$(docker image inspect -f '{{.Id}}' ldtm_user_code_image ldtm_dagster_image 2>/dev/null || true)
LDTM_BASE_IMAGE=$LDTM_BASE_IMAGE LDTM_POSTGRES_IMAGE=$LDTM_POSTGRES_IMAGE $(compose_cmd) "$@" build \
    ldtm_user_code ldtm_webserver >"$LDTM_DEPLOY_CACHE/build.log" 2>&1 || { tail -40 "$LDTM_DEPLOY_CACHE/build.log"; exit 1; }
for kind in user_code dagster; do
    newest=$(docker images -q -f dangling=true -f "label=ldtm.builder=$kind" | head -1)
    [[ -z $newest ]] || docker tag "$newest" "ldtm_${kind}_builder:cache"
done
docker image prune -f --filter label=ldtm.stage=builder >/dev/null
# The images this build replaced, unless a container still uses them (a run in flight, or a finished run's
# container kept for its log: `docker container prune --filter label=dagster/run_id` frees those).
for id in $replaced; do
    if [[ $(docker image inspect -f '{{len .RepoTags}}' "$id" 2>/dev/null) == 0 ]]; then
        docker image rm "$id" >/dev/null 2>&1 || true
    fi
done
log "images built; dangling images left: $(docker images -q -f dangling=true | wc -l)"
