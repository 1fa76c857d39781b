#!/bin/sh
# The test command: installs what is missing, builds, runs every test. Each test that needs
# a broker starts its own mosquitto on a free loopback port, so tests run in parallel.
set -eu
cd "$(dirname "$0")/.."
scripts/setup.sh
swift build --build-tests
# At most eight tests at a time (Swift Testing otherwise starts all of them at once): on two
# cores hundreds of brokers, evaluators and browsers starting together starve each other past
# their timeouts; eight keep both cores busy and the whole run shorter (161 s against 202 s
# with two CPU hogs beside it).
SWT_EXPERIMENTAL_MAXIMUM_PARALLELIZATION_WIDTH=${SWT_EXPERIMENTAL_MAXIMUM_PARALLELIZATION_WIDTH:-8} \
    swift test --skip-build
