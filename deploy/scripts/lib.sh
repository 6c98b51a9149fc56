# Shared by the deploy scripts (sourced): the cache directory and the compose command.
# Built images and the wheelhouse are cached under LDTM_DEPLOY_CACHE (outside the repository) and
# rebuilt only when their inputs change: each build records the hash of its inputs.
LDTM_DEPLOY_CACHE=${LDTM_DEPLOY_CACHE:-/var/cache/ldtm-deploy}
LDTM_BASE_IMAGE=${LDTM_BASE_IMAGE:-ldtm-base:bookworm}
LDTM_POSTGRES_IMAGE=${LDTM_POSTGRES_IMAGE:-ldtm-postgres:15}
LDTM_PROXY_IMAGE=${LDTM_PROXY_IMAGE:-ldtm-nginx:bookworm}
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

# A docker image of the debootstrap root filesystem (build_base_image.sh, inputs $1) with Debian packages
# installed through a chroot on the host: apt_image IMAGE "PACKAGES" [CLEANUP_PATHS...]. No service
# starts inside the chroot; apt's lists and caches and the given paths are removed before the import.
apt_image() {
    local image=$1 packages=$2 base_inputs rootfs
    shift 2
    base_inputs=$(image_inputs "$LDTM_BASE_IMAGE")
    rootfs=$LDTM_DEPLOY_CACHE/rootfs-$(echo "$image" | tr -c 'a-zA-Z0-9\n' '-')-$base_inputs
    log "installing $packages into $rootfs"
    rm -rf "$rootfs"
    cp -a "$LDTM_DEPLOY_CACHE/rootfs-$base_inputs" "$rootfs"
    cp /etc/resolv.conf "$rootfs/etc/resolv.conf"
    printf '#!/bin/sh\nexit 101\n' >"$rootfs/usr/sbin/policy-rc.d"
    chmod 755 "$rootfs/usr/sbin/policy-rc.d"
    chroot "$rootfs" /bin/sh -c "apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
        apt-get install -y -qq --no-install-recommends $packages && apt-get clean" \
        >"$LDTM_DEPLOY_CACHE/apt-$(basename "$rootfs").log" 2>&1 ||
        { tail -20 "$LDTM_DEPLOY_CACHE/apt-$(basename "$rootfs").log"; return 1; }
    local extra
    for extra in "$@"; do rm -rf "${rootfs:?}/$extra"; done
    rm -rf "$rootfs/usr/sbin/policy-rc.d" "$rootfs"/var/lib/apt/lists/* "$rootfs/.complete"
    tar -C "$rootfs" -c . | docker import - "$image" >/dev/null
    rm -rf "$rootfs"
}
