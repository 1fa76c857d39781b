#!/bin/sh
# Creates mosquitto's password file for a venue: the service accounts evaluator, notifier,
# consent, operator, consumer and dashboard, and one account per AGENT (its username is its agent id,
# which acl.conf requires in its topics).
#
# A password comes from PERIMETER_PASSWORD_<ACCOUNT> (upper case, other characters than
# letters and digits as _: phone-7 -> PERIMETER_PASSWORD_PHONE_7); without one a random
# password is generated and printed once, here, as "account password": store it (each
# service's /etc/perimeter/*.env) before you lose it. The file is written anew every time
# (mosquitto_passwd -c), mode 600; the broker must be able to read it.
set -eu

usage() {
    echo "usage: $0 PASSWORD_FILE [AGENT ...]" >&2
    echo "  e.g. PERIMETER_PASSWORD_EVALUATOR=… $0 /etc/mosquitto/perimeter/passwd phone-7 gw-hall" >&2
}
if [ $# -lt 1 ]; then usage; exit 64; fi
case "$1" in -h|--help) usage; exit 0 ;; esac
file=$1
shift

passwd=$(command -v mosquitto_passwd || true)
if [ -z "$passwd" ]; then
    echo "$0: mosquitto_passwd is not installed (it comes with mosquitto: apt-get install -y mosquitto)" >&2
    exit 1
fi

random_password() {
    if command -v openssl >/dev/null 2>&1; then
        openssl rand -hex 16
    else
        od -An -N16 -tx1 /dev/urandom | tr -d ' \n'
    fi
}

umask 077
tmp="$file.tmp.$$"
trap 'rm -f "$tmp"' EXIT
first=1
for account in evaluator notifier consent operator consumer dashboard "$@"; do
    case "$account" in
        */* | *+* | *#* | *:* | "")
            echo "$0: account '$account' must be one topic level without ':' (no /, +, #)" >&2
            exit 64
            ;;
    esac
    variable="PERIMETER_PASSWORD_$(printf '%s' "$account" | tr 'a-z' 'A-Z' | tr -c 'A-Z0-9' '_')"
    password=$(printenv "$variable" || true)
    if [ -z "$password" ]; then
        password=$(random_password)
        echo "$account $password"
    fi
    if [ $first -eq 1 ]; then
        "$passwd" -b -c "$tmp" "$account" "$password"
        first=0
    else
        "$passwd" -b "$tmp" "$account" "$password"
    fi
done
mv "$tmp" "$file"
trap - EXIT
echo "wrote $file" >&2
