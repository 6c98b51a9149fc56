#!/usr/bin/env bash
# A PostgreSQL image standing in for postgres:16 where no registry is reachable: Debian's postgresql-15
# installed (on the host, through a chroot) into the debootstrap root filesystem of build_base_image.sh,
# then deploy/postgres-standin (an entrypoint honouring POSTGRES_USER/PASSWORD/DB and init scripts).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
"$(dirname "$0")/build_base_image.sh"

base_inputs=$(image_inputs "$LDTM_BASE_IMAGE")
standin=$REPO_ROOT/deploy/postgres-standin
inputs=$( (echo "$base_inputs postgresql-15 v1"; cat "$standin/Dockerfile" "$standin/entrypoint.sh") | sha256sum | cut -c1-16)
if [[ $(image_inputs "$LDTM_POSTGRES_IMAGE") == "$inputs" ]]; then
    log "$LDTM_POSTGRES_IMAGE is up to date ($inputs)"
    exit 0
fi
pg_base=ldtm-postgres-base:$base_inputs
if ! docker image inspect "$pg_base" >/dev/null 2>&1; then
    # The package's own cluster is not used: the entrypoint initialises $PGDATA.
    apt_image "$pg_base" postgresql-15 etc/postgresql/15/main var/lib/postgresql/15
fi
log "building $LDTM_POSTGRES_IMAGE"
docker build -q --build-arg BASE="$pg_base" --label ldtm.inputs="$inputs" -t "$LDTM_POSTGRES_IMAGE" "$standin" >/dev/null
log "built $LDTM_POSTGRES_IMAGE"
