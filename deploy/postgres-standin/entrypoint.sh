#!/bin/bash
# A stand-in for the official postgres image's entrypoint, for hosts that reach no registry: the same
# POSTGRES_USER / POSTGRES_PASSWORD / POSTGRES_DB and /docker-entrypoint-initdb.d/*.sql|*.sh on first start.
set -euo pipefail
: "${POSTGRES_PASSWORD:?POSTGRES_PASSWORD must be set}"
POSTGRES_USER=${POSTGRES_USER:-postgres}
POSTGRES_DB=${POSTGRES_DB:-$POSTGRES_USER}
PGDATA=${PGDATA:-/var/lib/postgresql/data}
export PGDATA
as_pg() { runuser -u postgres -- "$@"; }

mkdir -p "$PGDATA" /run/postgresql
chown -R postgres:postgres "$PGDATA" /run/postgresql
chmod 700 "$PGDATA"

if [[ ! -s $PGDATA/PG_VERSION ]]; then
    pwfile=$(mktemp)
    printf '%s\n' "$POSTGRES_PASSWORD" >"$pwfile"
    chown postgres "$pwfile"
    as_pg initdb -D "$PGDATA" -U "$POSTGRES_USER" --pwfile="$pwfile" --auth-local=trust \
        --auth-host=scram-sha-256 -E UTF8 >/dev/null
    rm -f "$pwfile"
    echo "host all all all scram-sha-256" >>"$PGDATA/pg_hba.conf"
    # Init scripts run against a server that listens on the socket only.
    as_pg pg_ctl -D "$PGDATA" -o "-c listen_addresses=''" -w start >/dev/null
    if [[ $POSTGRES_DB != postgres ]]; then
        as_pg psql -v ON_ERROR_STOP=1 -U "$POSTGRES_USER" -d postgres -q \
            -c "CREATE DATABASE \"$POSTGRES_DB\""
    fi
    for f in /docker-entrypoint-initdb.d/*; do
        case $f in
        *.sql) echo "initdb: $f"; as_pg psql -v ON_ERROR_STOP=1 -U "$POSTGRES_USER" -d "$POSTGRES_DB" -q -f "$f" ;;
        *.sh) echo "initdb: $f"; source "$f" ;;
        esac
    done
    as_pg pg_ctl -D "$PGDATA" -m fast -w stop >/dev/null
    echo "database initialised"
fi
exec runuser -u postgres -- postgres -D "$PGDATA" -c listen_addresses='*'
