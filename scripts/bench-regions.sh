#!/usr/bin/env bash
# What one region costs to read, prepare and evaluate, for crafted shapes (a comb of long
# teeth, a fan of spikes, many holes, many parts, a spiral) and an ordinary polygon:
#
#   scripts/bench-regions.sh [POSITIONS [FIXES]]     # default 3000 positions, 2000 fixes
#
# Compiles PerimeterCore's sources plus bench/regions/main.swift with swiftc -O into
# .build/bench-regions (a few minutes; no SwiftPM release build needed) and runs it. Columns:
# parse (as a regions file, and with the live-region limits), PreparedRegion, a GeofenceEngine
# with the region, and the mean cost of a fix at uniform points over its bounding box.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
mkdir -p .build
mapfile -t core < <(find Sources/PerimeterCore -name '*.swift' | sort)
if [ ! -x .build/bench-regions ] || [ -n "$(find Sources/PerimeterCore bench/regions -newer .build/bench-regions -name '*.swift' | head -1)" ]; then
    echo "building .build/bench-regions …" >&2
    "${SWIFTC:-swiftc}" -O -parse-as-library -module-name PerimeterBench "${core[@]}" bench/regions/main.swift \
        -o .build/bench-regions
fi
.build/bench-regions "$@"
