#!/bin/sh
# ldtm_proxy's start: the password file from LDTM_UI_USER / LDTM_UI_PASSWORD (SHA-512 crypt, by openssl),
# then nginx in the foreground. A missing, short or placeholder password stops the proxy here, so
# nothing is served without a real one.
set -eu
user=${LDTM_UI_USER:-}
password=${LDTM_UI_PASSWORD:-}
[ -n "$user" ] || { echo "ldtm_proxy: set LDTM_UI_USER in .env (deploy/docker/env.example)" >&2; exit 1; }
case $user in *:*) echo "ldtm_proxy: LDTM_UI_USER must not contain ':'" >&2; exit 1 ;; esac
case $password in
change-me | changeme | change_me) echo "ldtm_proxy: LDTM_UI_PASSWORD is still the placeholder: set a real one" >&2; exit 1 ;;
esac
[ ${#password} -ge 12 ] || { echo "ldtm_proxy: LDTM_UI_PASSWORD must have at least 12 characters" >&2; exit 1; }
umask 077
printf '%s:%s\n' "$user" "$(printf '%s' "$password" | openssl passwd -6 -stdin)" >/tmp/ldtm_ui.htpasswd
unset LDTM_UI_PASSWORD password
exec nginx -e stderr -c /etc/ldtm/nginx.conf -g 'daemon off;'
