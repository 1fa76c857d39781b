#!/bin/sh
# Makes the TLS files for a venue's broker with openssl: a local CA, a server certificate for
# HOSTNAME (also valid for localhost and 127.0.0.1) and a client certificate per ACCOUNT.
# Idempotent: files that exist are kept (a server certificate is remade only when it does not
# name HOSTNAME); delete a file to remake it. Keys are EC P-256, mode 600.
#
#   ca.crt ca.key              the CA (keep ca.key off the broker if you can)
#   server.crt server.key      for mosquitto's certfile/keyfile
#   clients/ACCOUNT.crt .key   for require_certificate true (CN = ACCOUNT)
set -eu

usage() {
    echo "usage: $0 DIR HOSTNAME [ACCOUNT ...]" >&2
    echo "  e.g. $0 /etc/mosquitto/perimeter broker.museum.example evaluator consumer phone-7" >&2
}
if [ $# -lt 2 ]; then usage; exit 64; fi
case "$1" in -h|--help) usage; exit 0 ;; esac

dir=$1
host=$2
shift 2
days=${PERIMETER_CERT_DAYS:-825}
command -v openssl >/dev/null 2>&1 || { echo "$0: openssl is not installed (apt-get install -y openssl)" >&2; exit 1; }

mkdir -p "$dir/clients"
umask 077
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

newkey() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; chmod 600 "$1"; }

# Signs $1 (a CSR) with the CA into $2, with the extensions in file $3.
sign() {
    openssl x509 -req -in "$1" -CA "$dir/ca.crt" -CAkey "$dir/ca.key" -CAcreateserial \
        -CAserial "$dir/ca.srl" -days "$days" -sha256 -extfile "$3" -out "$2" 2>/dev/null
    chmod 644 "$2"
}

if [ ! -f "$dir/ca.key" ] || [ ! -f "$dir/ca.crt" ]; then
    newkey "$dir/ca.key"
    openssl req -new -x509 -key "$dir/ca.key" -sha256 -days 3650 -subj "/CN=Perimeter local CA" \
        -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
        -out "$dir/ca.crt"
    chmod 644 "$dir/ca.crt"
    echo "made $dir/ca.crt"
fi

# An IP address goes into the SAN as IP, anything else as DNS.
case "$host" in
    *[!0-9.]*) hostSAN="DNS:$host" ;;
    *) hostSAN="IP:$host" ;;
esac
if [ ! -f "$dir/server.crt" ] || [ ! -f "$dir/server.key" ] ||
    ! openssl x509 -in "$dir/server.crt" -noout -ext subjectAltName 2>/dev/null | grep -q -F "${hostSAN#*:}"; then
    newkey "$dir/server.key"
    openssl req -new -key "$dir/server.key" -subj "/CN=$host" -out "$work/server.csr"
    printf '%s\n' "basicConstraints=critical,CA:FALSE" "keyUsage=critical,digitalSignature,keyEncipherment" \
        "extendedKeyUsage=serverAuth" "subjectAltName=DNS:localhost,IP:127.0.0.1,$hostSAN" >"$work/server.ext"
    sign "$work/server.csr" "$dir/server.crt" "$work/server.ext"
    echo "made $dir/server.crt for $host, localhost, 127.0.0.1"
fi

for account in "$@"; do
    case "$account" in
        */* | *+* | *#* | "") echo "$0: account '$account' must be one topic level (no /, +, #)" >&2; exit 64 ;;
    esac
    if [ -f "$dir/clients/$account.crt" ] && [ -f "$dir/clients/$account.key" ]; then continue; fi
    newkey "$dir/clients/$account.key"
    openssl req -new -key "$dir/clients/$account.key" -subj "/CN=$account" -out "$work/client.csr"
    printf '%s\n' "basicConstraints=critical,CA:FALSE" "keyUsage=critical,digitalSignature" \
        "extendedKeyUsage=clientAuth" >"$work/client.ext"
    sign "$work/client.csr" "$dir/clients/$account.crt" "$work/client.ext"
    echo "made $dir/clients/$account.crt"
done
