#!/bin/sh
# The run command: installs what is missing, builds a release binary and runs `perimeter up`
# on the embedded default (a private mosquitto on a free loopback port, the sample museum).
# Extra arguments go to `perimeter up` (try --help).
set -eu
cd "$(dirname "$0")/.."
scripts/setup.sh
swift build -c release --product perimeter >&2
exec .build/release/perimeter up "$@"
