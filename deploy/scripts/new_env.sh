#!/usr/bin/env bash
# Make the compose stack's .env from deploy/docker/env.example: every secret the template leaves empty
# (every *_PASSWORD= and *_KEY= line) gets a random value, and the file is created
# readable by its owner only. Never overwrites: an existing file is left as it is.
# Usage: deploy/scripts/new_env.sh [FILE]   (default: .env in the repository root)
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:-$repo/.env}
if [[ -e $out ]]; then
    echo "$out exists: left as it is (edit it, or move it away first)" >&2
    exit 1
fi
umask 077
tmp=$(mktemp "$(dirname "$out")/.env.XXXXXX")
made=()
trap 'rm -f "$tmp"' EXIT
while IFS= read -r line || [[ -n $line ]]; do
    if [[ $line =~ ^[A-Z_]+(_PASSWORD|_KEY)=$ ]]; then
        printf '%s%s\n' "$line" "$(python3 -c 'import secrets; print(secrets.token_urlsafe(24))')"
        made+=("${line%=}")
    else
        printf '%s\n' "$line"
    fi
done <"$repo/deploy/docker/env.example" >"$tmp"
mv -n "$tmp" "$out"
[[ ! -e $tmp ]] || { echo "$out appeared meanwhile: left as it is" >&2; exit 1; }
trap - EXIT
echo "wrote $out (mode 600) with new random ${made[*]};" \
    "the UI's user is $(grep '^LDTM_UI_USER=' "$out" | cut -d= -f2), its password in $out"
