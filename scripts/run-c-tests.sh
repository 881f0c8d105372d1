#!/bin/sh
# Runs every Criterion test program in BUILD/tests and prints one summary
# line.  Usage: run-c-tests.sh BUILD
# Each test starts its own daemon in a private temporary directory and stops it.
B=${1:?usage: run-c-tests.sh BUILD}
JOBS=${MXOP_TEST_JOBS:-2}
passed=0 failed=0 status=0
log=$(mktemp)
for t in "$B"/tests/test_*; do
    [ -f "$t" ] && [ -x "$t" ] || continue
    echo "== $(basename "$t")"
    "$t" --jobs "$JOBS" >"$log" 2>&1
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
rm -f "$log"
echo "C tests: $passed passed, $failed failed"
exit $status
