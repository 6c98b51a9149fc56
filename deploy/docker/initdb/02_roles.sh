#!/bin/bash
# The PostgreSQL roles of the compose stack, least privilege (docs/operations.md, Security):
#   $DAGSTER_PG_USERNAME  owns Dagster's database (the instance: runs, events, schedules) and nothing else
#   ldtm_owner            owns the app database `ldtm`; only `ldtm db upgrade` / `ldtm db grant` use it
#   ldtm_app              reads and writes the app's rows as `ldtm db grant` allows (no DDL): runs, sensors
#   ldtm_reader           reads the app's tables: the dashboard
# None is a superuser; the superuser ($POSTGRES_USER) stays inside this container (backup, restore).
# Passwords come from this container's environment. Idempotent: the image's entrypoint runs it once on a
# new volume; deploy/scripts/create_roles.sh runs it again on an existing one (an upgrade, a password
# change) and restore.sh after a restore. It takes the databases' objects over from whoever owned them.
set -euo pipefail
: "${DAGSTER_PG_USERNAME:?}" "${DAGSTER_PG_PASSWORD:?}" "${LDTM_PG_OWNER_PASSWORD:?}" \
    "${LDTM_PG_APP_PASSWORD:?}" "${LDTM_PG_READER_PASSWORD:?}"
dagster_db=${DAGSTER_PG_DB:-dagster}
app_db=${LDTM_PG_APP_DB:-ldtm}
owner=${LDTM_PG_OWNER_ROLE:-ldtm_owner}
app=${LDTM_PG_APP_ROLE:-ldtm_app}
reader=${LDTM_PG_READER_ROLE:-ldtm_reader}
run_psql() { psql -X -q -v ON_ERROR_STOP=1 -U "${POSTGRES_USER:-postgres}" "$@"; }
if [[ $DAGSTER_PG_USERNAME == "${POSTGRES_USER:-postgres}" ]]; then
    echo "02_roles.sh: DAGSTER_PG_USERNAME is the superuser ($DAGSTER_PG_USERNAME): give Dagster a role of its" \
        "own and set LDTM_PG_ADMIN_USER to the superuser (docs/operations.md, upgrading to separate roles)" >&2
    exit 1
fi

# Every value is a psql variable (:'name' / :"name"), never formatted into the SQL.
run_psql -d postgres -v dagster="$DAGSTER_PG_USERNAME" -v dagster_pw="$DAGSTER_PG_PASSWORD" \
    -v owner="$owner" -v owner_pw="$LDTM_PG_OWNER_PASSWORD" -v app="$app" -v app_pw="$LDTM_PG_APP_PASSWORD" \
    -v reader="$reader" -v reader_pw="$LDTM_PG_READER_PASSWORD" -v dagster_db="$dagster_db" -v app_db="$app_db" <<'SQL'
SELECT format('CREATE ROLE %I LOGIN', r) FROM unnest(ARRAY[:'dagster', :'owner', :'app', :'reader']) AS r
    WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = r) \gexec
SELECT format('ALTER ROLE %I WITH LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS', r)
    FROM unnest(ARRAY[:'dagster', :'owner', :'app', :'reader']) AS r \gexec
ALTER ROLE :"dagster" PASSWORD :'dagster_pw';
ALTER ROLE :"owner" PASSWORD :'owner_pw';
ALTER ROLE :"app" PASSWORD :'app_pw';
ALTER ROLE :"reader" PASSWORD :'reader_pw';
SELECT format('CREATE DATABASE %I', d) FROM unnest(ARRAY[:'dagster_db', :'app_db']) AS d
    WHERE NOT EXISTS (SELECT FROM pg_database WHERE datname = d) \gexec
ALTER DATABASE :"dagster_db" OWNER TO :"dagster";
ALTER DATABASE :"app_db" OWNER TO :"owner";
-- Each database is reached only by the roles that use it.
REVOKE ALL ON DATABASE :"dagster_db" FROM PUBLIC;
REVOKE ALL ON DATABASE :"app_db" FROM PUBLIC;
GRANT CONNECT ON DATABASE :"app_db" TO :"app", :"reader";
-- Price ingest stages rows in a temporary table.
GRANT TEMPORARY ON DATABASE :"app_db" TO :"app";
-- No role of the stack needs the maintenance database or the template (the superuser keeps them).
REVOKE CONNECT, TEMPORARY ON DATABASE postgres FROM PUBLIC;
REVOKE CONNECT, TEMPORARY ON DATABASE template1 FROM PUBLIC;
-- The reader (the dashboard) cannot hold what writers wait for: no statement, lock wait or idle
-- transaction of its lasts long (its advisory locks are revoked below).
ALTER ROLE :"reader" SET statement_timeout = '60s';
ALTER ROLE :"reader" SET lock_timeout = '5s';
ALTER ROLE :"reader" SET idle_in_transaction_session_timeout = '30s';
SQL

# Advisory locks serialise the chain's writers, fills and migrations (ldtm_core.db.write_lock, migrate):
# in the app database only its owner and the application role may take one; the reader may not block them.
run_psql -d "$app_db" -v owner="$owner" -v app="$app" <<'SQL'
SELECT format('REVOKE EXECUTE ON FUNCTION %s FROM PUBLIC', p.oid::regprocedure) FROM pg_proc p
    JOIN pg_namespace n ON n.oid = p.pronamespace
    WHERE n.nspname = 'pg_catalog' AND p.proname LIKE 'pg%advisory%' \gexec
SELECT format('GRANT EXECUTE ON FUNCTION %s TO %I, %I', p.oid::regprocedure, :'owner', :'app') FROM pg_proc p
    JOIN pg_namespace n ON n.oid = p.pronamespace
    WHERE n.nspname = 'pg_catalog' AND p.proname LIKE 'pg%advisory%' \gexec
SQL

# Inside each database: its schema's objects belong to its owner (a deployment before the roles had one
# superuser owning all of them).
take_over() {
    run_psql -d "$1" -v owner="$2" <<'SQL'
ALTER SCHEMA public OWNER TO :"owner";
SELECT format('ALTER TABLE %I.%I OWNER TO %I', schemaname, tablename, :'owner') FROM pg_tables
    WHERE schemaname = 'public' AND tableowner <> :'owner' \gexec
SELECT format('ALTER SEQUENCE %I.%I OWNER TO %I', schemaname, sequencename, :'owner') FROM pg_sequences
    WHERE schemaname = 'public' AND sequenceowner <> :'owner' \gexec
SELECT format('ALTER VIEW %I.%I OWNER TO %I', schemaname, viewname, :'owner') FROM pg_views
    WHERE schemaname = 'public' AND viewowner <> :'owner' \gexec
SELECT format('ALTER TYPE %I.%I OWNER TO %I', n.nspname, t.typname, :'owner') FROM pg_type t
    JOIN pg_namespace n ON n.oid = t.typnamespace
    WHERE n.nspname = 'public' AND t.typtype = 'e' AND pg_get_userbyid(t.typowner) <> :'owner' \gexec
SQL
}
take_over "$dagster_db" "$DAGSTER_PG_USERNAME"
take_over "$app_db" "$owner"
echo "roles: $DAGSTER_PG_USERNAME owns $dagster_db; $owner owns $app_db, $app writes it, $reader reads it"
