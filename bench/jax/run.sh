#!/bin/sh
# The JAX rows of the benchmarks (bench/jax/bench_jax.py), in the JAX
# environment (make jax).  Usage: run.sh BUILD [PYTHON]; results also in
# BUILD/bench/jax.json.  MXOP_BENCH_SCALE scales the call counts.
B=${1:?usage: run.sh BUILD [PYTHON]}
PY=${2:-build/venv/bin/python3}
if [ ! -x "$PY" ] || [ ! -f "$B/python/_jaxffi.so" ]; then
    echo "bench: JAX rows skipped: $PY or $B/python/_jaxffi.so missing (make jax)"
    exit 0
fi
echo
echo "JAX ($PY bench/jax/bench_jax.py; microseconds per jitted call):"
mkdir -p "$B/bench"
MXOP_BUILD_DIR="$B" MXOP_NO_FASTCALL=1 PYTHONPATH="$(pwd)/python${PYTHONPATH:+:$PYTHONPATH}" \
    "$PY" "$(dirname "$0")/bench_jax.py" "$B" --out "$B/bench/jax.json"
