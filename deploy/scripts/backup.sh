#!/usr/bin/env bash
# Back up a running compose stack: every PostgreSQL database (Dagster's instance and the app database
# `ldtm`, pg_dumpall), the artifacts volume (checkpoints, exports, step outputs) and the receipts volume
# (the signed receipts; not the key, which lives in .env), into one folder.
# Usage: deploy/scripts/backup.sh [FOLDER]   (default ./ldtm-backup-<UTC time>; the folder 700, its files 600)
# The credentials are the postgres container's own (POSTGRES_USER, set from .env at `up`), not your
# shell's; `docker exec` without -t, so no TTY mangles the dump (compose v1's `exec` allocates one).
# Fails (non-zero, nothing left under the final names) when pg_dumpall fails or the dump is not complete.
set -euo pipefail
PG_CONTAINER=${LDTM_PG_CONTAINER:-ldtm_postgres}
ARTIFACTS_VOLUME=${LDTM_ARTIFACTS_VOLUME:-ldtm_artifacts}
RECEIPTS_VOLUME=${LDTM_RECEIPTS_VOLUME:-ldtm_receipts}
TAR_IMAGE=${LDTM_TAR_IMAGE:-ldtm_user_code_image}
out=${1:-ldtm-backup-$(date -u +%Y%m%dT%H%M%SZ)}
fail() { echo "backup FAILED: $*" >&2; exit 1; }
# The dump holds every table and the roles' password hashes: the owner alone reads the backup.
umask 077

[[ $(docker inspect -f '{{.State.Running}}' "$PG_CONTAINER" 2>/dev/null) == true ]] ||
    fail "the container $PG_CONTAINER is not running (start the stack: docker compose up -d, or docker-compose up -d)"
mkdir -p "$out"
out=$(cd "$out" && pwd)
dump=$out/postgres.sql.gz
rm -f "$dump.part" "$out/artifacts.tgz.part" "$out/receipts.tgz.part"

# pipefail: a failing pg_dumpall fails the pipeline, not only an empty gzip.
docker exec "$PG_CONTAINER" sh -c 'exec pg_dumpall -U "$POSTGRES_USER"' | gzip >"$dump.part" ||
    { rm -f "$dump.part"; fail "pg_dumpall in $PG_CONTAINER failed (see its message above)"; }
# A complete dump ends with pg_dumpall's trailer and carries the app database.
bytes=$(gzip -dc "$dump.part" | wc -c)
if ((bytes == 0)); then
    rm -f "$dump.part"
    fail "the dump of $PG_CONTAINER is empty"
fi
# Read to the end (no grep -q: an early exit would kill gzip with SIGPIPE, a failure under pipefail).
trailer=$(gzip -dc "$dump.part" | tail -5)
if [[ $trailer != *"PostgreSQL database cluster dump complete"* ]]; then
    rm -f "$dump.part"
    fail "the dump of $PG_CONTAINER ($bytes bytes) is cut short: no 'dump complete' trailer"
fi
# The app database by its exact name, created and filled (`ldtm_old` alone is not the app's; issue 38 D10).
created=$(gzip -dc "$dump.part" | awk -f "$(dirname "${BASH_SOURCE[0]}")/dump_databases.awk" | grep -cx ldtm || true)
filled=$(gzip -dc "$dump.part" | grep -cx '\\connect ldtm' || true)
if ((created == 0 || filled == 0)); then
    rm -f "$dump.part"
    fail "the dump of $PG_CONTAINER has no database 'ldtm' (the app tables)"
fi
mv "$dump.part" "$dump"

archive() {  # archive VOLUME NAME: the volume's files into $out/NAME.tgz
    docker run --rm --network none --user 0 -v "$1":/a:ro -v "$out":/b "$TAR_IMAGE" \
        tar -C /a -czf "/b/$2.tgz.part" . ||
        { rm -f "$out/$2.tgz.part"; fail "could not archive the volume $1"; }
    mv "$out/$2.tgz.part" "$out/$2.tgz"
    # The archive is written inside a container, under its own umask.
    chmod 600 "$out/$2.tgz"
}
archive "$ARTIFACTS_VOLUME" artifacts
archives="artifacts.tgz ($(du -h "$out/artifacts.tgz" | cut -f1))"
# A stack of a release before receipts has no receipts volume.
if docker volume inspect "$RECEIPTS_VOLUME" >/dev/null 2>&1; then
    archive "$RECEIPTS_VOLUME" receipts
    archives+=", receipts.tgz ($(du -h "$out/receipts.tgz" | cut -f1))"
fi
chmod 600 "$out/postgres.sql.gz"
chmod 700 "$out"
echo "backup in $out: postgres.sql.gz ($bytes bytes of SQL), $archives"
