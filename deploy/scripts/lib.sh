# Shared by the deploy scripts (sourced): the cache directory and the compose command.
# Built images and the wheelhouse are cached under LDTM_DEPLOY_CACHE (outside the repository) and
# rebuilt only when their inputs change: each build records the hash of its inputs.
LDTM_DEPLOY_CACHE=${LDTM_DEPLOY_CACHE:-/var/cache/ldtm-deploy}
LDTM_BASE_IMAGE=${LDTM_BASE_IMAGE:-ldtm-base:bookworm}
LDTM_POSTGRES_IMAGE=${LDTM_POSTGRES_IMAGE:-ldtm-postgres:15}
TORCH_SPEC=${TORCH_SPEC:-torch==2.13.0}
REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
mkdir -p "$LDTM_DEPLOY_CACHE"

log() { echo "[deploy $(date -u +%H:%M:%S)] $*" >&2; }
die() { echo "[deploy $(date -u +%H:%M:%S)] ERROR: $*" >&2; exit 1; }

# Docker Compose v2 (`docker compose`) where the plugin exists, else the v1 `docker-compose`.
compose_cmd() {
    if docker compose version >/dev/null 2>&1; then
        echo "docker compose"
    elif command -v docker-compose >/dev/null 2>&1; then
        echo "docker-compose"
    else
        echo "neither 'docker compose' nor 'docker-compose' is installed" >&2
        return 1
    fi
}

# The hash an image was built from (label ldtm.inputs), empty when the image does not exist.
image_inputs() { docker image inspect -f '{{ index .Config.Labels "ldtm.inputs" }}' "$1" 2>/dev/null || true; }
