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
# The output is kept: on a failure, the failed tests and their issues are printed again at the
# end, where a CI log that shows only its tail still names them.
log=$(mktemp)
status=$(mktemp)
trap 'rm -f "$log" "$status"' EXIT
{
    code=0
    SWT_EXPERIMENTAL_MAXIMUM_PARALLELIZATION_WIDTH=${SWT_EXPERIMENTAL_MAXIMUM_PARALLELIZATION_WIDTH:-8} \
        swift test --skip-build "$@" 2>&1 || code=$?
    echo "$code" >"$status"
} | tee "$log"
code=$(cat "$status")
if [ "$code" -ne 0 ]; then
    echo
    echo "scripts/test.sh: the run failed (exit $code). What failed, again:"
    grep -a -E '✘|recorded an issue|Expectation failed|Caught error|error:' "$log" | grep -a -v -E '^(✔|◇)' | tail -n 80
    exit "$code"
fi
