#!/bin/sh
# Installs what Perimeter needs on Debian 12 (with the Swift 6.3 toolchain already on PATH),
# only where it is missing, so running it again does nothing. Needs root (or sudo).
set -eu

# mosquitto is needed as a program, not as Debian's system service: tests and `perimeter up`
# run private brokers on free loopback ports. SecureBrokerTests also run openssl (through
# deploy/mosquitto/make-certs.sh) and mosquitto_passwd, which comes with mosquitto.
# `perimeter render -o X.png` runs rsvg-convert (librsvg2-bin; labels need a font: DejaVu); the
# dashboard's browser test runs headless chromium.
# gpsd: the agent's gpsd source is tested against the real daemon fed real NMEA captures,
# directly and through gpsfake (gpsd-clients; installed without recommends, as everything here).
# nats-server: BrokerTierTests run a three-node NATS cluster with MQTT (deploy/nats/).
# libcurl4-openssl-dev: the notifier's webhook and mail channels go out through libcurl (its
# OpenSSL flavour, the TLS library already linked for HMAC).
# libmicrohttpd-dev: every HTTP endpoint we serve (dashboard, /metrics, /healthz) runs on
# GNU libmicrohttpd (the CMicroHTTPD system-library target; Debian 12 ships 0.9.75).
# libnats-dev: the NATS C client (3.4), for partition leases in JetStream key-value (the CNats
# system-library target; docs/scale.md).
# prometheus: for its promtool, which MonitoringAssetsTests run on deploy/prometheus/alerts.yml
# (check rules, and the rules' unit tests in alerts.test.yml); the server it also installs is not
# used by the tests.
# systemd: for systemd-analyze, which HardenedUnitsTests run on deploy/systemd/*.service (offline:
# nothing is started).
packages="mosquitto mosquitto-clients libmosquitto-dev libsqlite3-dev libssl-dev libcurl4-openssl-dev libmicrohttpd-dev libnats-dev pkg-config libxml2 openssl ca-certificates python3 python3-aiosmtpd librsvg2-bin fonts-dejavu-core chromium gpsd gpsd-clients nats-server prometheus systemd"
missing=""
for package in $packages; do
    if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed"; then
        missing="$missing $package"
    fi
done

if [ -n "$missing" ]; then
    echo "setup: installing$missing" >&2
    sudo=""
    if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi

if ! command -v swift >/dev/null 2>&1; then
    echo "setup: swift is not on PATH; install the Swift 6.3 toolchain (https://swift.org/install)" >&2
    exit 1
fi
