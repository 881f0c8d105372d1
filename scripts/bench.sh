#!/bin/sh
# Runs the benchmarks (bench/): every BUILD/bin/bench_* with BUILD as its
# argument.  Each starts and stops its own daemon and writes its results
# under BUILD/bench/.  Usage: bench.sh BUILD
# MXOP_BENCH_SCALE (default 1) scales the iteration counts (0.2: a quick run).
B=${1:?usage: bench.sh BUILD}
# The Python rows' interpreter: PYTHON, else the Makefile's virtual environment
# (the C extensions are built against it), else Debian's.
venv="$(pwd)/build/venv/bin/python3"
[ -x "$venv" ] || venv=/usr/bin/python3
PY=${PYTHON:-$venv}
found=0
for b in "$B"/bin/bench_*; do
    [ -x "$b" ] || continue
    found=1
    "$b" "$B" || exit 1
done
[ $found = 1 ] || { echo "bench: no benchmarks built yet" >&2; exit 1; }

# The plot of calls/s against client processes (section 6 of bench_mxop).
if [ -f "$B/bench/results.json" ]; then
    "$PY" "$(dirname "$0")/../bench/plot_scaling.py" \
        "$B/bench/results.json" "$B/bench/scaling.png" || exit 1
fi

# The Python layer: per-call cost and ops from PyTorch vs PyTorch's own (the
# torch_call_* rows: a call from torch 2 against in-process custom ops).
echo
echo "Python layer ($PY -m mxop.bench; microseconds per call):"
MXOP_BUILD_DIR="$B" PYTHONPATH="$(pwd)/python${PYTHONPATH:+:$PYTHONPATH}" \
    "$PY" -m mxop.bench --out "$B/bench/python.json" || exit 1

# JAX: mxop.jax under jit vs an in-process jax.ffi handler and
# jax.nn.relu, in the JAX environment (bench/jax/run.sh; `make bench-jax` alone).
sh "$(dirname "$0")/../bench/jax/run.sh" "$B" "${JAX_PYTHON:-$PY}" || exit 1
