#!/bin/sh
# Runs the benchmarks (bench/).  Usage: bench.sh BUILD
B=${1:?usage: bench.sh BUILD}
found=0
for b in "$B"/bin/bench_*; do
    [ -x "$b" ] || continue
    found=1
    "$b" || exit 1
done
[ $found = 1 ] || { echo "bench: no benchmarks built yet" >&2; exit 1; }
