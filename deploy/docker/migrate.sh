#!/bin/sh
# ldtm_migrate, at every `up`, before anything that uses the app database or the artifacts volume:
# 1. hands the artifacts and receipts volumes to `ldtm` (uid 10001) where a file is not its own (a volume
#    of the release that ran as root, or a restored archive of one): the only step that runs as root;
# 2. as `ldtm` with the owner role's URL: `ldtm db upgrade`, then `ldtm db grant` (docs/operations.md,
#    Security). A failure stops the services that depend on it from starting.
set -eu
for volume in "${LDTM_HOME:-/opt/ldtm/artifacts}" /opt/ldtm/receipts; do
    [ -d "$volume" ] || continue
    if [ -n "$(find "$volume" ! -user ldtm -print -quit)" ]; then
        echo "ldtm_migrate: $volume holds files not owned by ldtm: handing them over (chown -R ldtm:ldtm)"
        chown -R ldtm:ldtm "$volume"
    fi
done
as_ldtm() { exec env HOME=/home/ldtm setpriv --reuid=ldtm --regid=ldtm --init-groups -- "$@"; }
# `docker compose run --rm ldtm_migrate ldtm db upgrade --dry-run`: that command instead, as ldtm.
[ $# -eq 0 ] || as_ldtm "$@"
as_ldtm sh -c 'ldtm db upgrade && ldtm db grant --app ldtm_app --reader ldtm_reader'
