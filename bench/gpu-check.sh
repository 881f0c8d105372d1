#!/bin/sh
# bench/gpu-check.sh - the GPU check, on a machine with a CUDA device (under 5 minutes).
#
#     sh bench/gpu-check.sh [BUILD]        (BUILD defaults to build)
#
# 1. builds everything with CUDA=1 (relu_cuda.so, crash_cuda.so and the rest);
# 2. runs tests/test_gpu: on a GPU machine every test must run, a skip is a failure;
# 3. runs BUILD/bin/gpu_check: relu_cuda and the cuBLAS gemm against the host
#    results (relative errors), tensors at offsets inside one allocation, an
#    illegal address inside a CUDA op with the worker's recovery, and the cost
#    of a GPU op call through mxop against the same op called in process;
# 4. runs python/tests/test_cuda.py when torch sees the GPU.
#
# Exits 77 with "no GPU: ..." where there is no device (nothing is built
# then), 1 if a step failed, 0 when all passed.  Its numbers go into
# docs/performance.md ("GPU").
set -u
cd "$(dirname "$0")/.." || exit 1
B=${1:-build}
JOBS=$(nproc 2>/dev/null || echo 4)
start=$(date +%s)

# A GPU, before anything is built: the driver's device nodes and its tool.
if [ ! -e /dev/nvidia0 ] && [ ! -e /dev/nvidiactl ]; then
    echo "gpu-check: no GPU: no /dev/nvidia* device on this machine"
    exit 77
fi
if command -v nvidia-smi >/dev/null 2>&1; then
    if ! nvidia-smi -L >/dev/null 2>&1; then
        echo "gpu-check: no GPU: nvidia-smi -L lists no device"
        exit 77
    fi
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader |
        sed 's/^/gpu-check: device: /'
fi

step() { echo "== gpu-check: $* ($(( $(date +%s) - start )) s)"; }

step "build with CUDA=1"
blog=$(mktemp)
if ! timeout 240 make -j"$JOBS" CUDA=1 B="$B" all >"$blog" 2>&1; then
    tail -n 40 "$blog"
    rm -f "$blog"
    echo "gpu-check: FAIL: the CUDA=1 build failed"
    exit 1
fi
grep '^CUDA:' "$blog" | head -n 1
rm -f "$blog"
status=0

step "tests/test_gpu"
log=$(mktemp)
timeout 120 "$B/tests/test_gpu" --verbose --jobs 1 >"$log" 2>&1
rc=$?
grep -E '^\[(PASS|FAIL|SKIP|ERR)|Synthesis' "$log"
# A device node, but CUDA sees no device (no driver for this runtime, ...).
if grep -q '^\[SKIP\].*no CUDA device' "$log"; then
    sed -n 's/^\[SKIP\][^:]*::[^:]*: no CUDA device: \(.*\)/gpu-check: no GPU: \1/p' "$log" |
        head -n 1
    rm -f "$log"
    exit 77
fi
if [ $rc -ne 0 ]; then
    echo "gpu-check: FAIL: test_gpu failed"
    status=1
elif grep -q '^\[SKIP\]' "$log"; then
    echo "gpu-check: FAIL: test_gpu skipped tests on a GPU machine"
    status=1
fi
rm -f "$log"

step "gpu_check"
timeout 150 "$B/bin/gpu_check" "$B"
rc=$?
if [ $rc -eq 77 ]; then
    exit 77
elif [ $rc -ne 0 ]; then
    echo "gpu-check: FAIL: gpu_check exited $rc"
    status=1
fi

if [ -x /usr/bin/python3 ] && /usr/bin/python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
    step "python/tests/test_cuda.py"
    if ! MXOP_BUILD_DIR="$(pwd)/$B" PYTHONPATH="$(pwd)/python" timeout 120 \
        /usr/bin/python3 -m pytest -q -p no:cacheprovider -rs python/tests/test_cuda.py; then
        echo "gpu-check: FAIL: python/tests/test_cuda.py"
        status=1
    fi
else
    echo "== gpu-check: python/tests/test_cuda.py skipped: torch here has no CUDA"
fi

step "done, status $status"
exit $status
