#!/bin/sh
# Runs every Criterion test program in BUILD/tests and prints one summary
# line.  Usage: run-c-tests.sh BUILD
# Each test starts its own daemon in a private temporary directory and stops it.
#
# Both data paths are covered by the same tests: every program runs with
# MXOP_DATA_PATH=shm (the shared-memory mailbox), then the programs that
# make calls run again with MXOP_DATA_PATH=socket.  MXOP_TEST_PATHS limits
# the passes (e.g. MXOP_TEST_PATHS=socket).
B=${1:?usage: run-c-tests.sh BUILD}
JOBS=${MXOP_TEST_JOBS:-2}
PATHS=${MXOP_TEST_PATHS:-shm socket}
# Under SANITIZE=address, leaks Criterion's runner keeps are not ours (tests/lsan.supp).
LSAN_OPTIONS="suppressions=$(cd "$(dirname "$0")/.." && pwd)/tests/lsan.supp${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
export LSAN_OPTIONS
# Unit tests that never make a call: one pass is enough.
ONCE="test_frame test_headers test_pbwalk"
passed=0 failed=0 status=0 first=1
log=$(mktemp)
for path in $PATHS; do
    for t in "$B"/tests/test_*; do
        [ -f "$t" ] && [ -x "$t" ] || continue
        name=$(basename "$t")
        if [ $first = 0 ] && echo " $ONCE " | grep -q " $name "; then
            continue
        fi
        echo "== $name (data path: $path)"
        MXOP_DATA_PATH=$path "$t" --jobs "$JOBS" >"$log" 2>&1
        rc=$?
        cat "$log"
        line=$(grep 'Synthesis:' "$log" | tail -n 1)
        p=$(echo "$line" | sed -n 's/.*Passing: \([0-9]*\).*/\1/p')
        f=$(echo "$line" | sed -n 's/.*Failing: \([0-9]*\).*/\1/p')
        c=$(echo "$line" | sed -n 's/.*Crashing: \([0-9]*\).*/\1/p')
        passed=$((passed + ${p:-0}))
        failed=$((failed + ${f:-0} + ${c:-0}))
        if [ "$rc" -ne 0 ]; then
            status=1
            [ -z "$line" ] && failed=$((failed + 1))
        fi
    done
    first=0
done
rm -f "$log"
echo "C tests: $passed passed, $failed failed (data paths: $PATHS)"
exit $status
