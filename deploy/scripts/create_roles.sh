#!/usr/bin/env bash
# (Re)make the PostgreSQL roles of a running stack from .env: deploy/docker/initdb/02_roles.sh, which a new
# volume runs on its first start, run again inside ldtm_postgres. Idempotent. For an upgrade from the
# release with one role for everything, a changed password, or after editing the roles' names in .env;
# `docker compose up -d ldtm_postgres` first, so the container has this .env's values
# (docs/operations.md, "Upgrading to separate database roles").
set -euo pipefail
PG_CONTAINER=${LDTM_PG_CONTAINER:-ldtm_postgres}
[[ $(docker inspect -f '{{.State.Running}}' "$PG_CONTAINER" 2>/dev/null) == true ]] ||
    { echo "create_roles: $PG_CONTAINER is not running: docker compose up -d ldtm_postgres" >&2; exit 1; }
for _ in $(seq 1 60); do
    docker exec "$PG_CONTAINER" sh -c 'pg_isready -q -U "$POSTGRES_USER"' && break
    sleep 2
done
docker exec "$PG_CONTAINER" bash /docker-entrypoint-initdb.d/02_roles.sh
