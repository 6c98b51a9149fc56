#!/usr/bin/env bash
# A Debian bookworm base image with Python 3 built from Debian's packages (debootstrap), for hosts that
# reach no image registry. Also keeps the root filesystem: build_postgres_image.sh starts from it.
# Usage: deploy/scripts/build_base_image.sh   (image name: $LDTM_BASE_IMAGE, default ldtm-base:bookworm)
set -euo pipefail
source "$(dirname "$0")/lib.sh"

INCLUDE=python3,python3-venv,python3-pip,ca-certificates,libgomp1
inputs=$(echo "debootstrap minbase bookworm $INCLUDE v1" | sha256sum | cut -c1-16)
rootfs=$LDTM_DEPLOY_CACHE/rootfs-$inputs
if [[ $(image_inputs "$LDTM_BASE_IMAGE") == "$inputs" && -d $rootfs/usr ]]; then
    log "$LDTM_BASE_IMAGE is up to date ($inputs)"
    exit 0
fi
if [[ ! -f $rootfs/.complete ]]; then
    log "debootstrap bookworm into $rootfs (about a minute)"
    rm -rf "$rootfs" "$rootfs.tmp"
    debootstrap --variant=minbase --include=$INCLUDE bookworm "$rootfs.tmp" >"$LDTM_DEPLOY_CACHE/debootstrap.log" 2>&1 ||
        { tail -20 "$LDTM_DEPLOY_CACHE/debootstrap.log"; exit 1; }
    rm -rf "$rootfs.tmp"/var/cache/apt/archives/*.deb "$rootfs.tmp"/var/lib/apt/lists/*
    touch "$rootfs.tmp/.complete"
    mv "$rootfs.tmp" "$rootfs"
fi
log "docker import $LDTM_BASE_IMAGE"
tar -C "$rootfs" --exclude=./.complete -c . |
    docker import -c "LABEL ldtm.inputs=$inputs" -c 'CMD ["/bin/bash"]' - "$LDTM_BASE_IMAGE" >/dev/null
log "built $LDTM_BASE_IMAGE"
