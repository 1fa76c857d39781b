#!/bin/sh
# The test command: installs what is missing, builds, runs every test. Each test that needs
# a broker starts its own mosquitto on a free loopback port, so tests run in parallel.
set -eu
cd "$(dirname "$0")/.."
scripts/setup.sh
swift build --build-tests
swift test --skip-build
