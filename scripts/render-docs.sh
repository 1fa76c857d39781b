#!/bin/sh
# Regenerates the pictures in docs/images/: every sample venue's map (config/*/ with its
# regions.geojson and venue.json) as SVG and PNG, the real GPX drive with its events, and the
# dashboard screenshot that the headless-Chromium test takes.
set -eu
cd "$(dirname "$0")/.."
scripts/setup.sh
swift build --product perimeter >&2
perimeter=.build/debug/perimeter
images=docs/images
mkdir -p "$images"

for dir in config/*/; do
    dir=${dir%/}
    [ -f "$dir/regions.geojson" ] || continue
    name=$(basename "$dir")
    for format in svg png; do
        "$perimeter" render --venue "$dir" --title "$name ($dir: regions, beacons, gateways)" -o "$images/$name.$format"
    done
    echo "$images/$name.svg, $images/$name.png" >&2
done

for format in svg png; do
    "$perimeter" render --regions config/venues/museum.geojson --title "museum (config/venues/museum.geojson)" \
        -o "$images/museum-regions.$format"
done

fixtures=Tests/PerimeterCLITests/Fixtures
for format in svg png; do
    "$perimeter" render --regions "$fixtures/render/visnjan-regions.geojson" \
        --track "$fixtures/gpx/around-visnjan-with-car.gpx" \
        --title "A real drive near Višnjan (gpxpy test track) against visnjan-regions.geojson" \
        -o "$images/visnjan-track.$format"
done
echo "$images/visnjan-track.svg, $images/visnjan-track.png" >&2

PERIMETER_DOCS_IMAGES="$PWD/$images" swift test --filter BrowserTests >&2
echo "$images/dashboard.png" >&2
