#!/bin/sh
# Runs libFuzzer targets one after the other.  Usage: fuzz.sh FUZZ_DIR SECONDS TARGET...
# Each target starts from its seed corpus (tests/fuzz/corpus/<name>/, read
# only) plus what earlier runs found (FUZZ_DIR/work/<name>/, where new
# inputs go); a crash leaves its input in FUZZ_DIR/artifacts/ and fails
# the run.  The last line sums the executions of every target.
FB=${1:?usage: fuzz.sh FUZZ_DIR SECONDS TARGET...}
SECS=${2:?usage: fuzz.sh FUZZ_DIR SECONDS TARGET...}
shift 2
status=0 total=0 passed=0 failed=0
log=$(mktemp)
for t in "$@"; do
    name=${t#fuzz_}
    work="$FB/work/$name"
    mkdir -p "$work" "$FB/artifacts"
    seeds="tests/fuzz/corpus/$name"
    [ -d "$seeds" ] || seeds=""
    echo "== $t: $SECS s"
    # -rss_limit_mb: the call target maps two regions and the example ops;
    # libFuzzer's default 2 GiB is ample, but a leak must stop it, not the machine.
    "$FB/$t" -max_total_time="$SECS" -print_final_stats=1 -rss_limit_mb=2048 \
        -artifact_prefix="$FB/artifacts/$name-" "$work" $seeds >"$log" 2>&1
    rc=$?
    grep -E '^(INFO: (Loaded|seed corpus)|#[0-9]+.*DONE|stat::number_of_executed_units|stat::peak_rss_mb|==[0-9]+==ERROR|SUMMARY)' "$log"
    runs=$(sed -n 's/^stat::number_of_executed_units: *\([0-9]*\).*/\1/p' "$log" | tail -n 1)
    total=$((total + ${runs:-0}))
    if [ $rc -ne 0 ]; then
        tail -n 40 "$log"
        echo "$t: FAILED (exit $rc); inputs in $FB/artifacts/"
        failed=$((failed + 1))
        status=1
    else
        passed=$((passed + 1))
    fi
done
rm -f "$log"
echo "fuzz: $total executions in all"
echo "fuzz: $passed passed, $failed failed"
exit $status
