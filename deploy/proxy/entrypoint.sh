#!/bin/sh
# ldtm_proxy's start: two password files (SHA-512 crypt, by openssl), one for the Dagster UI (operators:
# LDTM_UI_USER / LDTM_UI_PASSWORD) and one for the dashboard (readers: LDTM_DASHBOARD_USER /
# LDTM_DASHBOARD_PASSWORD), then nginx in the foreground. A missing, short or placeholder password, or the
# same password for both, stops the proxy here, so nothing is served without real, separate ones.
set -eu
umask 077
hashed() {  # NAME USER PASSWORD FILE
    [ -n "$2" ] || { echo "ldtm_proxy: set $1_USER in .env (deploy/docker/env.example)" >&2; exit 1; }
    case $2 in *:*) echo "ldtm_proxy: $1_USER must not contain ':'" >&2; exit 1 ;; esac
    case $3 in
    change-me | changeme | change_me | password) echo "ldtm_proxy: $1_PASSWORD is still a placeholder: set a real one" >&2; exit 1 ;;
    esac
    [ ${#3} -ge 16 ] || { echo "ldtm_proxy: $1_PASSWORD must have at least 16 characters" >&2; exit 1; }
    printf '%s:%s\n' "$2" "$(printf '%s' "$3" | openssl passwd -6 -stdin)" >"$4"
}
hashed LDTM_UI "${LDTM_UI_USER:-}" "${LDTM_UI_PASSWORD:-}" /tmp/ldtm_ui.htpasswd
hashed LDTM_DASHBOARD "${LDTM_DASHBOARD_USER:-}" "${LDTM_DASHBOARD_PASSWORD:-}" /tmp/ldtm_dashboard.htpasswd
if [ "${LDTM_UI_PASSWORD}" = "${LDTM_DASHBOARD_PASSWORD}" ]; then
    echo "ldtm_proxy: LDTM_DASHBOARD_PASSWORD is LDTM_UI_PASSWORD: a dashboard reader would operate Dagster" >&2
    exit 1
fi
unset LDTM_UI_PASSWORD LDTM_DASHBOARD_PASSWORD
exec nginx -e stderr -c /etc/ldtm/nginx.conf -g 'daemon off;'
