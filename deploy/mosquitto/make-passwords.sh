#!/bin/sh
# Creates mosquitto's password file for a venue: the service accounts evaluator, notifier,
# consent, operator, consumer, dashboard and homeassistant, and one account per AGENT (its username is its agent id,
# which acl.conf requires in its topics).
#
# A password comes from PERIMETER_PASSWORD_<ACCOUNT> (upper case, other characters than
# letters and digits as _: phone-7 -> PERIMETER_PASSWORD_PHONE_7); without one a random
# password is generated and printed once, here, as "account password": store it (each
# service's /etc/perimeter/*.env) before you lose it. The file is written anew every time,
# mode 600; the broker must be able to read it.
#
# No password is ever on a command line (where `ps` and /proc/*/cmdline show it to every
# user): the accounts are written as `name:password` lines by the shell's own printf into the
# new file (mode 600 from the start), and `mosquitto_passwd -U` hashes that file in place.
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
: >"$tmp"
for account in evaluator notifier consent operator consumer dashboard homeassistant "$@"; do
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
    case "$password" in
        *"
"*)
            echo "$0: $variable holds a line break: one line only" >&2
            exit 64
            ;;
    esac
    # printf is a shell builtin: the password never becomes a process argument.
    printf '%s:%s\n' "$account" "$password" >>"$tmp"
done
"$passwd" -U "$tmp"
mv "$tmp" "$file"
trap - EXIT
echo "wrote $file" >&2
