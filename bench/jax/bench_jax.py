"""The JAX rows of `make bench`: mxop.jax against XLA in process.

  1. per-call cost of a tiny op under jax.jit: relu of 16 f32 through
     mxop.jax (the FFI handler, libmxop, the worker) against the same relu
     as an in-process XLA FFI handler (bench/jax/inproc_relu.c);
  2. relu of 1 MiB (262144 f32) through mxop.jax under jit against
     jax.nn.relu under jit.

Each row: the median and p99 of n timed calls of the jitted function, each
call waited for (block_until_ready), after a warm-up; mxop and its baseline
in 5 interleaved rounds (the order alternating), their results checked
equal first.  Usage:
bench_jax.py BUILD [--n N] [--out FILE.json]
"""
import argparse
import ctypes
import json
import os
import sys
import time

import numpy as np
import jax
import jax.numpy as jnp

import mxop
import mxop.jax as mj


def samples(fn, x, n):
    ts = []
    for _ in range(n):
        t0 = time.perf_counter()
        jax.block_until_ready(fn(x))
        ts.append(time.perf_counter() - t0)
    return ts


def pair(f, g, x, n, rounds=5):
    """Times f and g on x: n calls each, in `rounds` interleaved rounds (the
    order alternating), after a warm-up; (median, p99) of each."""
    for fn in (f, g):
        samples(fn, x, max(n // 10, 10))
    tf, tg = [], []
    for r in range(rounds):
        for fn, out in ((f, tf), (g, tg)) if r % 2 == 0 else ((g, tg), (f, tf)):
            out += samples(fn, x, max(n // rounds, 1))

    def stat(ts):
        ts.sort()
        return ts[len(ts) // 2], ts[min(len(ts) - 1, int(len(ts) * 0.99))]

    return stat(tf), stat(tg)


def us(s):
    return "%.1f µs" % (s * 1e6)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--n", type=int, default=int(2000 * float(os.environ.get("MXOP_BENCH_SCALE",
                                                                           "1"))))
    ap.add_argument("--out")
    a = ap.parse_args()
    n = max(a.n, 50)
    inproc = ctypes.CDLL(os.path.join(a.build, "bench", "libjax_inproc_relu.so"))
    jax.ffi.register_ffi_target("bench_inproc_relu", jax.ffi.pycapsule(inproc.bench_relu_handler),
                                platform="cpu")

    def inproc_relu(x):
        return jax.ffi.ffi_call("bench_inproc_relu", jax.ShapeDtypeStruct(x.shape, x.dtype))(x)

    c = mxop.connect()
    relu = mj.load(c, "relu.so").relu
    rows = []
    for label, size, base_label, base in (
            ("relu f32 x16 (per-call cost), mxop.jax under jit", 16,
             "in-process jax.ffi relu", inproc_relu),
            ("relu f32 1 MiB, mxop.jax under jit", 262144, "jax.nn.relu under jit", jax.nn.relu)):
        x = jnp.asarray(np.random.default_rng(0).standard_normal(size).astype(np.float32))
        f, g = jax.jit(relu), jax.jit(base)
        np.testing.assert_array_equal(f(x), g(x))
        (m, p), (bm, bp) = pair(f, g, x, n)
        rows.append({"benchmark": label, "n": n, "median_s": m, "p99_s": p,
                     "baseline": base_label, "baseline_median_s": bm, "baseline_p99_s": bp,
                     "ratio": m / bm})
    print("| benchmark | n | median | p99 | baseline | median | p99 | ratio |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print("| %s | %d | %s | %s | %s | %s | %s | %.2fx |" % (
            r["benchmark"], r["n"], us(r["median_s"]), us(r["p99_s"]), r["baseline"],
            us(r["baseline_median_s"]), us(r["baseline_p99_s"]), r["ratio"]))
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"jax": jax.__version__, "rows": rows}, f, indent=1)
    c.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
