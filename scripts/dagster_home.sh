#!/usr/bin/env bash
# Prepare $DAGSTER_HOME with this repository's instance config (called by `make dev`).
#   LDTM_DAGSTER_STORAGE=sqlite (default): dagster.yaml, SQLite storage under $DAGSTER_HOME.
#   LDTM_DAGSTER_STORAGE=postgres: deploy/postgres/dagster.yaml, credentials from DAGSTER_PG_*.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
: "${DAGSTER_HOME:?set DAGSTER_HOME to the directory that should hold the Dagster instance}"
case "${LDTM_DAGSTER_STORAGE:-sqlite}" in
  sqlite) src="$repo/dagster.yaml" ;;
  postgres)
    src="$repo/deploy/postgres/dagster.yaml"
    for v in DAGSTER_PG_USERNAME DAGSTER_PG_HOST DAGSTER_PG_PORT DAGSTER_PG_DB; do
      [ -n "${!v:-}" ] || { echo "dagster_home.sh: $v must be set for PostgreSQL storage" >&2; exit 2; }
    done
    [ -n "${DAGSTER_PG_PASSWORD+x}" ] || { echo "dagster_home.sh: DAGSTER_PG_PASSWORD must be set (may be empty)" >&2; exit 2; }
    ;;
  *) echo "dagster_home.sh: LDTM_DAGSTER_STORAGE must be sqlite or postgres, not '$LDTM_DAGSTER_STORAGE'" >&2; exit 2 ;;
esac
mkdir -p "$DAGSTER_HOME"
cp "$src" "$DAGSTER_HOME/dagster.yaml"
echo "DAGSTER_HOME=$DAGSTER_HOME (instance config from ${src#"$repo"/})"
