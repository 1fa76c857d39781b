#!/usr/bin/env bash
# Builds and runs Perimeter's libFuzzer targets (fuzz/targets/*.swift).
#
#   scripts/fuzz.sh [TARGET…] [--seconds N] [--jobs J] [--no-build] [--keep-going]
#
# TARGETs: inbound adverts regions json topics rules agent config httprequest outgoing (default: all). Each target is
# PerimeterCore's sources plus one entry file, compiled with `swiftc -sanitize=fuzzer,address` into
# .build/fuzz/<target> (an entry file may add sources of other modules with a `// fuzz-sources:`
# line of paths or globs, compiled into the same module with their `import Perimeter…` lines
# removed, and compiler flags with `// fuzz-flags:`, e.g. `-I Sources/CMosquitto -lmosquitto`),
# then run for N seconds (default 600) on fuzz/corpus/<target>
# (new inputs are added there; seeds are under fuzz/corpus/<target> too). Crashes go to
# .build/fuzz/artifacts/<target>-crash-…, logs to .build/fuzz/logs/<target>.log.
# J targets run at once (default 2). --keep-going runs libFuzzer in fork mode
# (-fork=1 -ignore_crashes=1): it keeps fuzzing after a crash and writes every crash found.
# Exits 1 if any target crashed (or failed to build).
#
# Environment: SWIFTC (default swiftc), FUZZ_OPT (default -O; -Onone compiles faster),
# FUZZ_FLAGS (extra libFuzzer flags), FUZZ_OUT (default .build/fuzz: binaries, logs, artifacts,
# working corpora; give concurrent campaigns different ones, they would overwrite each other's logs).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

all_targets=(inbound adverts regions json topics rules agent config httprequest outgoing)
targets=()
seconds=600
jobs=2
build=1
keep_going=0
while [ $# -gt 0 ]; do
    case "$1" in
        --seconds) seconds=$2; shift 2 ;;
        --seconds=*) seconds=${1#*=}; shift ;;
        --jobs) jobs=$2; shift 2 ;;
        --jobs=*) jobs=${1#*=}; shift ;;
        --no-build) build=0; shift ;;
        --keep-going) keep_going=1; shift ;;
        -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
        -*) echo "unknown option $1" >&2; exit 2 ;;
        *)
            if [ ! -f "fuzz/targets/$1.swift" ]; then echo "no target $1 (fuzz/targets/$1.swift)" >&2; exit 2; fi
            targets+=("$1"); shift ;;
    esac
done
[ ${#targets[@]} -gt 0 ] || targets=("${all_targets[@]}")

out=${FUZZ_OUT:-.build/fuzz}
mkdir -p "$out/artifacts" "$out/logs"
swiftc=${SWIFTC:-swiftc}
opt=${FUZZ_OPT:--O}
mapfile -t core < <(find Sources/PerimeterCore -name '*.swift' | sort)

build_one() {
    local t=$1
    # Sources of other modules named by the entry file, copied without their module imports.
    local extra=() flags=() pattern file copy
    rm -rf "$out/src/$t"
    mkdir -p "$out/src/$t"
    for pattern in $(sed -n 's|^// fuzz-sources:||p' "fuzz/targets/$t.swift"); do
        for file in $pattern; do
            [ -f "$file" ] || { echo "$t: no source $file" >&2; return 1; }
            copy="$out/src/$t/$(echo "$file" | tr / _)"
            sed -E '/^import (PerimeterCore|PerimeterKit|PerimeterMQTT|PerimeterStore|PerimeterEvaluator|PerimeterHTTP|PerimeterNet)$/d' \
                "$file" >"$copy"
            extra+=("$copy")
        done
    done
    read -r -a flags <<<"$(sed -n 's|^// fuzz-flags:||p' "fuzz/targets/$t.swift")"
    "$swiftc" "$opt" -g -sanitize=fuzzer,address -parse-as-library -module-name PerimeterFuzz \
        "${core[@]}" "${extra[@]}" "fuzz/targets/$t.swift" "${flags[@]}" -o "$out/$t" >"$out/logs/build-$t.log" 2>&1 \
        || { grep -v 'ld.gold: warning' "$out/logs/build-$t.log" >&2; return 1; }
}

run_one() {
    local t=$1
    mkdir -p "fuzz/corpus/$t"
    # A fresh working corpus per run keeps fuzz/corpus/<t> (the seeds) small and reviewable;
    # the seeds are read first, new inputs go to .build/fuzz/corpus/<t>.
    mkdir -p "$out/corpus/$t"
    local extra=()
    [ "$keep_going" = 0 ] || extra=(-fork=1 -ignore_crashes=1)
    touch "$out/logs/$t.start.$$"
    set +e
    # SWIFT_BACKTRACE=enable=no: Swift's own crash handler would otherwise catch the trap first
    # (and trip ASan while it reads memory), before libFuzzer writes the crashing input.
    SWIFT_BACKTRACE=enable=no "$out/$t" "$out/corpus/$t" "fuzz/corpus/$t" "${extra[@]}" \
        -max_len=65536 -timeout=10 -rss_limit_mb=4096 -max_total_time="$seconds" -print_final_stats=1 \
        -artifact_prefix="$out/artifacts/$t-" ${FUZZ_FLAGS:-} >"$out/logs/$t.log" 2>&1
    echo $? >"$out/logs/$t.rc"
    set -e
}

# Build (at most $jobs compiles at once).
failed_build=()
if [ "$build" = 1 ]; then
    pids=(); names=()
    for t in "${targets[@]}"; do
        echo "building $t …" >&2
        build_one "$t" & pids+=($!); names+=("$t")
        if [ ${#pids[@]} -ge "$jobs" ]; then
            wait "${pids[0]}" || failed_build+=("${names[0]}"); pids=("${pids[@]:1}"); names=("${names[@]:1}")
        fi
    done
    for i in "${!pids[@]}"; do wait "${pids[$i]}" || failed_build+=("${names[$i]}"); done
fi

# Run, $jobs at a time.
runnable=()
for t in "${targets[@]}"; do
    [[ " ${failed_build[*]:-} " == *" $t "* ]] || runnable+=("$t")
done
pids=()
for t in "${runnable[@]}"; do
    echo "fuzzing $t for ${seconds}s …" >&2
    run_one "$t" & pids+=($!)
    if [ ${#pids[@]} -ge "$jobs" ]; then wait "${pids[0]}"; pids=("${pids[@]:1}"); fi
done
for p in "${pids[@]:-}"; do [ -n "$p" ] && wait "$p"; done

# Report.
status=0
printf '%-8s %12s %8s %8s %8s  %s\n' target execs exec/s cov ft result
for t in "${targets[@]}"; do
    if [[ " ${failed_build[*]:-} " == *" $t "* ]]; then
        printf '%-8s %12s %8s %8s %8s  %s\n' "$t" - - - - "BUILD FAILED ($out/logs/build-$t.log)"; status=1; continue
    fi
    log="$out/logs/$t.log"
    execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1 || true)
    rate=$(grep -o 'stat::average_exec_per_sec: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1 || true)
    last=$(grep -E '^#[0-9]+' "$log" | grep 'cov:' | tail -1 || true)
    cov=$(echo "$last" | grep -o 'cov: [0-9]*' | grep -o '[0-9]*' || true)
    ft=$(echo "$last" | grep -o 'ft: [0-9]*' | grep -o '[0-9]*' || true)
    [ -n "$execs" ] || execs=$(echo "$last" | grep -o '^#[0-9]*' | tr -d '#' || true)
    if [ -z "$rate" ] && [ -n "$execs" ]; then
        # Fork mode prints no final stats: executions over the run's wall time.
        secs=$(echo "$last" | grep -o 'time: [0-9]*s' | grep -o '[0-9]*' || true)
        [ -z "$secs" ] || [ "$secs" = 0 ] || rate=$((execs / secs))
    fi
    artifacts=$(find "$out/artifacts" -name "$t-*" -newer "$out/logs/$t.start.$$" | sort)
    rm -f "$out/logs/$t.start.$$"
    forked=$(echo "$last" | grep -o 'crash: [0-9]*/[0-9]*/[0-9]*' | cut -d/ -f3 || true)
    if [ -n "$artifacts" ] || [ "${forked:-0}" != 0 ] \
        || grep -qE 'ERROR: libFuzzer|SUMMARY: (AddressSanitizer|libFuzzer|UndefinedBehaviorSanitizer)|Test unit written to' "$log"; then
        result="CRASH ($(echo "$artifacts" | grep -c . || true) inputs): $(echo $artifacts | cut -c1-400)"; status=1
    else
        result="ok"
    fi
    printf '%-8s %12s %8s %8s %8s  %s\n' "$t" "${execs:--}" "${rate:--}" "${cov:--}" "${ft:--}" "$result"
done
exit $status
