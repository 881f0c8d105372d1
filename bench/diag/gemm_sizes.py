"""bench/diag/gemm_sizes.py - gemm through mxop.numpy from one Python
thread at sizes around OpenBLAS's switch to two threads
(server/worker/blas.h): microseconds a call, the median of five timed
loops.

    MXOP_BUILD_DIR=$PWD/build PYTHONPATH=$PWD/python /usr/bin/python3 bench/diag/gemm_sizes.py
"""
import statistics
import time

import numpy as np

import mxop

d = mxop.Daemon(extra_args=["--trusted-library", "gemm.so"])
try:
    c = mxop.connect(d)
    gemm = c.load("gemm.so").gemm
    rng = np.random.default_rng(1)
    out = []
    for n in (176, 224, 256, 512):
        a = c.asarray(rng.standard_normal((n, n), dtype=np.float32))
        b = c.asarray(rng.standard_normal((n, n), dtype=np.float32))
        for _ in range(20):
            gemm(a, b)
        reps = max(20, int(2e6 / n ** 2))
        loops = []
        for _ in range(5):
            t0 = time.perf_counter()
            for _ in range(reps):
                gemm(a, b)
            loops.append((time.perf_counter() - t0) / reps * 1e6)
        out.append("%d: %.0f us" % (n, statistics.median(loops)))
    print(", ".join(out))
finally:
    d.stop()
