#!/bin/sh
# Runs a three-node NATS cluster with JetStream and MQTT on loopback from deploy/nats/node.conf,
# for `perimeter bench scale --broker 127.0.0.1:14883 --protocol 3.1.1` (docs/scale.md).
#
#   scripts/nats-cluster.sh DIR      start (JetStream files and logs in DIR), print the MQTT ports
#   scripts/nats-cluster.sh stop DIR stop the nodes started with DIR
#
# Ports: NATS 14222-14224, cluster 16222-16224, monitoring 18222-18224, MQTT 14883-14885.
set -eu
cd "$(dirname "$0")/.."
if [ "${1:-}" = stop ]; then
    dir=$2
    for pid in "$dir"/n*/pid; do [ -f "$pid" ] && kill "$(cat "$pid")" 2>/dev/null || true; done
    exit 0
fi
dir=${1:?usage: scripts/nats-cluster.sh DIR | stop DIR}
command -v nats-server >/dev/null || { echo "nats-server is missing: apt-get install nats-server" >&2; exit 1; }
for i in 1 2 3; do
    mkdir -p "$dir/n$i"
    routes=""
    for j in 1 2 3; do [ "$j" = "$i" ] || routes="$routes nats://127.0.0.1:1622$((j + 1))"; done
    set -- $routes
    PERIMETER_NATS_NAME=n$i PERIMETER_NATS_LISTEN=127.0.0.1:1422$((i + 1)) \
    PERIMETER_NATS_HTTP=127.0.0.1:1822$((i + 1)) PERIMETER_NATS_STORE="$dir/n$i" \
    PERIMETER_NATS_CLUSTER=127.0.0.1:1622$((i + 1)) PERIMETER_NATS_ROUTE_1=$1 PERIMETER_NATS_ROUTE_2=$2 \
    PERIMETER_NATS_MQTT=127.0.0.1:1488$((i + 2)) PERIMETER_NATS_ACK_WAIT=30s \
        nats-server -c deploy/nats/node.conf >"$dir/n$i/nats.log" 2>&1 &
    echo $! >"$dir/n$i/pid"
done
echo "MQTT on 127.0.0.1:14883, 127.0.0.1:14884, 127.0.0.1:14885; logs in $dir/n*/nats.log" >&2
