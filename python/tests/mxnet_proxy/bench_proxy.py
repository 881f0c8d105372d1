"""Cost of one MXNet call through libmxop_mxnet.so against the same op in process.

    make bench-mxnet        (MXNet 1.9.1's venv; MXOP_BUILD_DIR names the build)

The op is crashy_relu of tests/plugins/mx_proxy.so (y = max(x, 0), f32),
an MXNet extension library: one process loads it with mx.library.load
(in process), another loads the proxy configured with it (the op runs in
mxop's worker, tensors staged through the arena; and again with the
arrays in MXNet's cpu_shared context).  Each call is
mx.nd.crashy_relu(x, out=y) then y.wait_to_read(); the median of the
timed calls is printed, in microseconds.
"""
import json
import os
import subprocess
import sys

BUILD = os.environ.get("MXOP_BUILD_DIR") or os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "build")
FIXTURE = os.path.join(BUILD, "tests", "plugins", "mx_proxy.so")
PROXY = os.path.join(BUILD, "lib", "libmxop_mxnet.so")
SIZES = [("tiny (4 B)", 1), ("1 MiB", 1 << 18), ("64 MiB", 1 << 24)]

CHILD = r"""
import json, os, sys, time
import numpy as np, mxnet as mx
mx.library.load(sys.argv[1], verbose=False)
ctx = mx.Context(sys.argv[2])
res = {}
for label, n in json.loads(sys.argv[3]):
    x = mx.nd.array(np.linspace(-1, 1, n, dtype=np.float32) if n > 1 else [1.0], ctx=ctx)
    y = mx.nd.zeros((n,), ctx=ctx)
    reps = 2000 if n < 1000 else (200 if n < 1 << 20 else 10)
    for _ in range(min(reps, 20)):
        mx.nd.crashy_relu(x, out=y).wait_to_read()
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        mx.nd.crashy_relu(x, out=y)
        y.wait_to_read()
        times.append(time.perf_counter() - t)
    assert float(y[-1].asscalar()) == 1.0
    times.sort()
    res[label] = times[len(times) // 2] * 1e6
print(json.dumps(res))
"""


def run(lib, ctx, env):
    e = dict(os.environ)
    e.update(env)
    p = subprocess.run([sys.executable, "-c", CHILD, lib, ctx, json.dumps(SIZES)], env=e,
                       capture_output=True, text=True, timeout=900)
    if p.returncode != 0:
        sys.exit("benchmark child failed:\n" + p.stderr)
    return json.loads(p.stdout.strip().splitlines()[-1])


def main():
    e = {"MXOP_MXNET_LIBS": FIXTURE}
    e.pop("MXOP_SOCKET", None)
    cols = [("in process", run(FIXTURE, "cpu", {})),
            ("proxy, cpu", run(PROXY, "cpu", e)),
            ("proxy, cpu_shared", run(PROXY, "cpu_shared", e))]
    print("%-12s" % "size" + "".join("%20s" % c for c, _ in cols) + "%14s" % "proxy/in")
    for label, _ in SIZES:
        row = [r[label] for _, r in cols]
        print("%-12s" % label + "".join("%18.1f us" % v for v in row)
              + "%13.1fx" % (row[1] / row[0]))


if __name__ == "__main__":
    main()
