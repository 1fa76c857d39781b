#!/bin/sh
# Long fault campaigns: tests of the suite run with the durations a venue sees, on their own
# (the suite itself waits on conditions and keeps its faults short).
#
#   scripts/campaign.sh bridge-cut [SECONDS]
#       A bridged venue broker's uplink down for SECONDS (default 60) while the venue keeps
#       producing events; after it returns the central broker must have every one
#       (MosquittoBridgeTests with PERIMETER_BRIDGE_CUT_SECONDS).
set -eu
cd "$(dirname "$0")/.."
case "${1:-}" in
    bridge-cut)
        seconds=${2:-60}
        scripts/setup.sh
        swift build --build-tests
        PERIMETER_BRIDGE_CUT_SECONDS=$seconds swift test --skip-build --filter MosquittoBridgeTests
        ;;
    *)
        sed -n '2,9p' "$0" >&2
        exit 2
        ;;
esac
