#!/usr/bin/env bash
# Restore a backup of deploy/scripts/backup.sh into the stack's PostgreSQL, artifacts volume and (when the
# backup has them) receipts volume.
# Usage: deploy/scripts/restore.sh FOLDER [--force]
# Run it with only ldtm_postgres up (a new host, or after `down -v`):
#   docker compose up -d ldtm_postgres      (or docker-compose up -d ldtm_postgres)
#   deploy/scripts/restore.sh ldtm-backup-20261125T180000Z
#   docker compose up -d
# It replaces the databases of the backup (Dagster's and `ldtm`) and the volumes' contents. The receipts'
# signing key is not in the backup: it is LDTM_RECEIPT_KEY in .env (keep a copy of .env apart).
# It refuses while another LDTM container is running, and refuses to replace an `ldtm` database that
# already holds rows unless --force. The credentials are the postgres container's own (from .env);
# every role's password is set back to this .env's after the restore (the dump carries the old host's),
# and each database's objects to their role (deploy/docker/initdb/02_roles.sh).
set -euo pipefail
PG_CONTAINER=${LDTM_PG_CONTAINER:-ldtm_postgres}
ARTIFACTS_VOLUME=${LDTM_ARTIFACTS_VOLUME:-ldtm_artifacts}
RECEIPTS_VOLUME=${LDTM_RECEIPTS_VOLUME:-ldtm_receipts}
TAR_IMAGE=${LDTM_TAR_IMAGE:-ldtm_user_code_image}
fail() { echo "restore FAILED: $*" >&2; exit 1; }

[[ $# -ge 1 ]] || fail "usage: $0 FOLDER [--force]"
dir=$1
force=${2:-}
[[ -s $dir/postgres.sql.gz && -s $dir/artifacts.tgz ]] ||
    fail "$dir has no postgres.sql.gz and artifacts.tgz (made by deploy/scripts/backup.sh)"
dir=$(cd "$dir" && pwd)
gzip -t "$dir/postgres.sql.gz" || fail "$dir/postgres.sql.gz is damaged"

[[ $(docker inspect -f '{{.State.Running}}' "$PG_CONTAINER" 2>/dev/null) == true ]] ||
    fail "the container $PG_CONTAINER is not running: docker compose up -d ldtm_postgres (or docker-compose)"
busy=$(docker ps -q --filter name='^ldtm_(user_code|webserver|daemon|dashboard)$'; docker ps -q --filter label=dagster/run_id)
[[ -z $busy ]] || fail "stop the other LDTM containers first (docker compose stop; runs: docker ps --filter label=dagster/run_id)"

psql_pg() { docker exec -i "$PG_CONTAINER" sh -c 'exec psql -X -q -v ON_ERROR_STOP=1 -U "$POSTGRES_USER" "$@"' sh "$@"; }
# Over TCP: the first start's init-script server listens on the socket only, then stops.
for _ in $(seq 1 60); do
    docker exec "$PG_CONTAINER" sh -c 'pg_isready -q -h 127.0.0.1 -U "$POSTGRES_USER"' && break
    sleep 2
done

if [[ $force != --force ]]; then
    rows=$(psql_pg -d postgres -tA -c "select count(*) from pg_database where datname = 'ldtm'")
    if [[ $rows == 1 ]]; then
        tables=$(psql_pg -d ldtm -tA -c \
            "select count(*) from pg_stat_user_tables where n_live_tup > 0 and relname <> 'alembic_version'")
        [[ $tables == 0 ]] || fail "the database ldtm already holds rows in $tables tables: restore over it with --force"
    fi
fi

# The databases in the dump are created by it: drop this cluster's copies first (the fresh volume's
# empty ones, made from .env at first start).
# Names read whole, quotes and spaces included: "team reports" is not `team` (dump_databases.awk).
mapfile -t databases < <(gzip -dc "$dir/postgres.sql.gz" | awk -f "$(dirname "${BASH_SOURCE[0]}")/dump_databases.awk")
((${#databases[@]})) || fail "$dir/postgres.sql.gz creates no database"
for db in "${databases[@]}"; do
    psql_pg -d postgres -v db="$db" <<<'DROP DATABASE IF EXISTS :"db" WITH (FORCE);'
done
# pg_dumpall writes CREATE ROLE for every role, the connecting one too; those this cluster has already
# (the superuser, and the roles its first start made from .env) are left out.
existing=$(psql_pg -d postgres -tA -c "select rolname from pg_roles where rolname !~ '^pg_'")
gzip -dc "$dir/postgres.sql.gz" |
    awk -v roles="$existing" 'BEGIN { n = split(roles, r, "\n"); for (i = 1; i <= n; i++) skip["CREATE ROLE " r[i] ";"] = skip["CREATE ROLE \"" r[i] "\";"] = 1 }
        !($0 in skip)' |
    psql_pg -d postgres >/dev/null ||
    fail "psql stopped on an error while restoring $dir/postgres.sql.gz (message above)"
# The dump carries the old host's passwords: this .env's again, and each database's objects to its role.
docker exec -i "$PG_CONTAINER" sh -c \
    'psql -X -q -v ON_ERROR_STOP=1 -U "$POSTGRES_USER" -d postgres -v pw="$POSTGRES_PASSWORD"' \
    <<<"ALTER ROLE CURRENT_USER PASSWORD :'pw';" || fail "could not set the role's password back"
docker exec "$PG_CONTAINER" bash /docker-entrypoint-initdb.d/02_roles.sh >/dev/null ||
    fail "could not set the roles back (deploy/docker/initdb/02_roles.sh, message above)"

unpack() {  # unpack NAME VOLUME: $dir/NAME.tgz replaces the volume's files
    docker run --rm --network none --user 0 -v "$2":/a -v "$dir":/b:ro "$TAR_IMAGE" \
        sh -c "find /a -mindepth 1 -delete && tar -C /a -xzf /b/$1.tgz" ||
        fail "could not unpack $1.tgz into the volume $2"
}
unpack artifacts "$ARTIFACTS_VOLUME"
volumes=$ARTIFACTS_VOLUME
if [[ -s $dir/receipts.tgz ]]; then
    unpack receipts "$RECEIPTS_VOLUME"
    volumes+=" and $RECEIPTS_VOLUME"
fi
echo "restored $(printf '"%s" ' "${databases[@]}")and the volumes $volumes from $dir; now: docker compose up -d (or docker-compose up -d)"
