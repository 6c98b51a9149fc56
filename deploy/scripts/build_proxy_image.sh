#!/usr/bin/env bash
# An nginx image standing in for nginx:1.27 where no registry is reachable: Debian's nginx and openssl in
# the debootstrap root filesystem of build_base_image.sh. ldtm_proxy and ldtm_docker_proxy run it with
# the configuration of deploy/proxy (mounted by docker-compose.yml), as they run the official image.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
"$(dirname "$0")/build_base_image.sh"

inputs=$(echo "$(image_inputs "$LDTM_BASE_IMAGE") nginx openssl v1" | sha256sum | cut -c1-16)
if [[ $(image_inputs "$LDTM_PROXY_IMAGE") == "$inputs" ]]; then
    log "$LDTM_PROXY_IMAGE is up to date ($inputs)"
    exit 0
fi
apt_image "$LDTM_PROXY_IMAGE.tmp" "nginx openssl" etc/nginx/sites-enabled
echo "FROM $LDTM_PROXY_IMAGE.tmp" | docker build -q --label ldtm.inputs="$inputs" -t "$LDTM_PROXY_IMAGE" - >/dev/null
docker image rm "$LDTM_PROXY_IMAGE.tmp" >/dev/null
log "built $LDTM_PROXY_IMAGE"
