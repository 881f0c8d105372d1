"""Per-call cost of the Python layer, and mxop ops vs PyTorch's own.

    build/venv/bin/python3 -m mxop.bench [--socket PATH] [--n N] [--json] [--out FILE]
                                         [--torch-call]

Rows (microseconds per call, median of 5 runs of N calls):
  c_forward       mxop_forward through ctypes with every argument prebuilt:
                  the C call (IPC round trip) plus ctypes' own call cost
  numpy_relu      Op.__call__ on a 16-element f32 array in shared memory
                  (output allocated, wrapped as an ndarray)
  numpy_relu_heap the same with an ordinary ndarray input (staged)
  torch_relu_nograd   TorchOp on a tensor, no autograd
  torch_relu_grad     TorchOp building the autograd graph (Function.apply)
  torch_relu_fwd_bwd  forward + backward through autograd
  torch_builtin_relu  torch.relu, in process (the floor of any proxy)
  torch_ops_relu_nograd / _grad  the op through torch.ops.mxop.relu (dispatcher)
  torch_pyfunction_relu  a Python autograd.Function around torch.relu
  torch_ops_relu_fwd_bwd / torch_pyfunction_fwd_bwd: forward + backward of each;
                  torch_fwd_bwd_vs_pyfunction_ratio (target <= 1.5)
  stub_torch_ops_nograd  the Python layer's own cost through torch.ops
  stub_*_fwd_bwd  forward + backward with both calls stubbed
  threads_relu_4MiB_* / threads_softmax_64x160_*  calls/s of relu on 4 MiB and
                  of softmax on 64x160 (each about 100 us a call, on one CPU)
                  from 1 and 2 threads sharing one client (its pool of
                  sessions; target 2 vs 1 >= 1.6)
  fastcall        1 when the C call path (mxop._fastcall) made the calls, else 0
  torchops        1 when torch.ops.mxop's C++ kernels (mxop/_torchops.so) are loaded
  ctypes_stub_*   the stub rows again through the ctypes path and torch.ops'
                  Python kernels (the fallback, what MXOP_NO_FASTCALL=1 gives),
                  in the same run
  torch_ops_*_ratio  torch.ops.mxop.relu against torch.relu (no grad), a
                  Python autograd.Function (building the graph), and forward
                  + backward against the Function's (target <= 1.5)
  torch_relu_1MiB_mxop / _builtin / _ratio: relu of 1 MiB from PyTorch through
                  mxop vs torch.relu in process (target: ratio <= 1.2)
  gemm_mxop_NxN / gemm_torch_NxN: forward of an NxN f32 product
  user_{torch,numpy}_relu_{1,64}MiB_*: what a user gets, relu of 1 and 64
                  MiB of f32 made the ordinary way (torch.randn, NumPy), in
                  interleaved rounds: _inproc the framework's own op
                  (torch.relu; np.maximum(x, 0, out=y)); _staged through mxop
                  (torch.ops.mxop.relu; Op.__call__) with the allocator off, the
                  input copied into shared memory per call; _allocator the same
                  with mxop.allocator on and the input made after enabling it
                  (passed by reference, output in a warm shared-heap block);
                  torch's _to_shared with an input made by mxop.torch.to_shared
                  (allocator off).  The allocator is switched on or off before
                  each row's round (outside the timing), so that every row runs
                  in its own setting in one process; the in-process rows run
                  with it off (the framework as it is without mxop).  Each
                  row's _ratio is its time over the _inproc row's.
  torch_call_*    the cost of one call of relu on 16 floats (no grad), in one
                  run (--torch-call: these rows alone): torch.ops.mxop.relu,
                  torch.relu, the same relu as an in-process Python custom op
                  (torch.library.custom_op), as an in-process C++ op
                  (TORCH_LIBRARY, build/bench/torch_relu_op.so); relu of 1 MiB
                  through torch.ops.mxop and torch.relu; torch_call_mxop_vs_
                  custom_op_ratio (target < 1: mxop costs less than a Python
                  custom op)
The Python layer's cost is numpy_relu - c_forward; the stub_* rows measure
it without the IPC's noise: the same calls with mxop_forward replaced by a
C function that returns at once (stub_ctypes_call: that function called
through ctypes with prebuilt arguments, the floor of any ctypes binding).
"""

import argparse
import ctypes
import json
import os
import statistics
import sys
import time

import numpy as np


def _time(fn, n, reps=5):
    for _ in range(min(n, 200)):
        fn()
    runs = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        runs.append((time.perf_counter() - t0) / n * 1e6)
    return statistics.median(runs)


def _time_pair(fa, fb, n, reps=9):
    """Medians of fa and fb (us per call), timed in alternating rounds of n
    calls (the order flipping each round), so that drift of a shared machine
    hits both sides alike."""
    for _ in range(min(n, 200)):
        fa()
        fb()
    ra, rb = [], []
    for r in range(reps):
        for f, runs in ((fa, ra), (fb, rb)) if r % 2 == 0 else ((fb, rb), (fa, ra)):
            t0 = time.perf_counter()
            for _ in range(n):
                f()
            runs.append((time.perf_counter() - t0) / n * 1e6)
    return statistics.median(ra), statistics.median(rb)


def _torch_call(relu, n):
    """The torch_call_* rows (see the module's doc)."""
    import torch
    import mxop.torch as mt
    from mxop import _lib

    mt.TorchOp(relu)  # torch.ops.mxop.relu
    torch.set_num_threads(1)
    rows = {}
    x = mt.to_shared(torch.linspace(-1, 1, 16))
    fns = {"mxop_relu16": (torch.ops.mxop.relu, x), "builtin_relu16": (torch.relu, x)}
    if hasattr(torch.library, "custom_op"):
        @torch.library.custom_op("mxop_bench_py::relu", mutates_args=())
        def py_relu(t: torch.Tensor) -> torch.Tensor:
            return torch.relu(t)

        @py_relu.register_fake
        def _(t):
            return torch.empty_like(t)

        fns["custom_op_relu16"] = (torch.ops.mxop_bench_py.relu, x)
    so = os.path.join(_lib.build_dir(), "bench", "torch_relu_op.so")
    if os.path.exists(so):
        torch.ops.load_library(so)
        fns["cpp_op_relu16"] = (torch.ops.mxop_bench.relu, x)
    big = mt.to_shared(torch.randn(1 << 18))
    # In interleaved pairs (mxop against the Python custom op, the C++ op
    # against torch.relu), so that a shared machine's drift hits both alike.
    keys = list(fns)
    for ka, kb in (("mxop_relu16", "custom_op_relu16"), ("cpp_op_relu16", "builtin_relu16")):
        if ka in fns and kb in fns:
            (fa, xa), (fb, xb) = fns[ka], fns[kb]
            rows["torch_call_" + ka], rows["torch_call_" + kb] = _time_pair(
                lambda: fa(xa), lambda: fb(xb), n // 4)
    for k in keys:
        if "torch_call_" + k not in rows:
            f, a = fns[k]
            rows["torch_call_" + k] = _time(lambda: f(a), n)
    rows = {"torch_call_" + k: rows["torch_call_" + k] for k in keys}
    m1 = max(50, n // 40)
    rows["torch_call_mxop_relu_1MiB"], rows["torch_call_builtin_relu_1MiB"] = _time_pair(
        lambda: torch.ops.mxop.relu(big), lambda: torch.relu(big), m1)
    if "torch_call_custom_op_relu16" in rows:
        rows["torch_call_mxop_vs_custom_op_ratio"] = (rows["torch_call_mxop_relu16"] /
                                                      rows["torch_call_custom_op_relu16"])
    return rows


def run(socket=None, n=20000, gemm_n=256, torch_call=False):
    import mxop

    own = None
    if socket is None and not os.environ.get("MXOP_SOCKET"):
        # As bench_mxop does: the measured libraries are trusted, so that the
        # zero-copy path is what is timed (what scratch mode, the default for
        # untrusted libraries under strict, adds is section 8 of `make bench`).
        own = mxop.Daemon(extra_args=[a for lib_name in ("relu.so", "gemm.so", "noop.so",
                                                       "softmax.so")
                                      for a in ("--trusted-library", lib_name)])
        socket = own
    try:
        c = mxop.connect(socket)
        if torch_call:
            return _torch_call(c.load("relu.so").relu, n)
        return _run(c, n, gemm_n)
    finally:
        if own is not None:
            own.stop()


def _run(c, n, gemm_n):
    import mxop
    from mxop._lib import lib, MxopArray
    from mxop.client import block_of

    relu = c.load("relu.so").relu
    gemm = c.load("gemm.so").gemm
    rows = {}

    x = c.empty(16, np.float32)
    x[:] = np.linspace(-1, 1, 16)
    y = c.empty(16, np.float32)
    ia, oa = MxopArray(), MxopArray()
    ctypes.memmove(ctypes.addressof(ia), ctypes.addressof(block_of(x)), ctypes.sizeof(ia))
    ctypes.memmove(ctypes.addressof(oa), ctypes.addressof(block_of(y)), ctypes.sizeof(oa))
    ent = relu.entry({})
    f = lib.mxop_forward
    h, p, ca, ip, op_ = c.handle, relu.pointer, ent.addr, ctypes.addressof(ia), ctypes.addressof(oa)
    rows["c_forward"] = _time(lambda: f(h, p, ca, ip, 1, op_, 1), n)
    rows["numpy_relu"] = _time(lambda: relu(x), n)
    xh = np.linspace(-1, 1, 16).astype(np.float32)
    rows["numpy_relu_heap"] = _time(lambda: relu(xh), n)

    try:
        import torch
        import mxop.torch as mt
    except ImportError:
        torch = None
    if torch is not None:
        torch.set_num_threads(1)
        tr = mt.TorchOp(relu)
        tx = mt.to_shared(torch.linspace(-1, 1, 16))
        rows["torch_relu_nograd"] = _time(lambda: tr(tx), n)
        txg = tx.detach().requires_grad_()
        rows["torch_relu_grad"] = _time(lambda: tr(txg), n)

        def fb():
            tr(txg).backward(tx)

        rows["torch_relu_fwd_bwd"] = _time(fb, n // 2)
        rows["torch_builtin_relu"] = _time(lambda: torch.relu(tx), n)

        # The same 16 floats through the dispatcher (torch.ops.mxop.relu), and
        # the yardstick of a Python autograd.Function around torch.relu.
        class PyRelu(torch.autograd.Function):
            @staticmethod
            def forward(ctx, t):
                y = torch.relu(t)
                ctx.save_for_backward(y)
                return y

            @staticmethod
            def backward(ctx, g):
                y, = ctx.saved_tensors
                return g * (y > 0)

        top = torch.ops.mxop.relu
        rows["torch_ops_relu_nograd"] = _time(lambda: top(tx), n)
        rows["torch_ops_relu_grad"] = _time(lambda: top(txg), n)
        rows["torch_pyfunction_relu"] = _time(lambda: PyRelu.apply(txg), n)

        def fb_ops():
            top(txg).backward(tx)

        def fb_py():
            PyRelu.apply(txg).backward(tx)

        rows["torch_ops_relu_fwd_bwd"] = _time(fb_ops, n // 2)
        rows["torch_pyfunction_fwd_bwd"] = _time(fb_py, n // 2)
        rows["torch_fwd_bwd_vs_pyfunction_ratio"] = (rows["torch_relu_fwd_bwd"] /
                                                     rows["torch_pyfunction_fwd_bwd"])
        rows["torch_ops_fwd_bwd_vs_pyfunction_ratio"] = (rows["torch_ops_relu_fwd_bwd"] /
                                                         rows["torch_pyfunction_fwd_bwd"])
        rows["torch_ops_vs_builtin_ratio"] = (rows["torch_ops_relu_nograd"] /
                                              rows["torch_builtin_relu"])
        rows["torch_ops_grad_vs_pyfunction_ratio"] = (rows["torch_ops_relu_grad"] /
                                                      rows["torch_pyfunction_relu"])

        # relu on 1 MiB (262144 f32) from PyTorch: through mxop (zero-copy
        # input, output allocated in shared memory per call) vs torch.relu in
        # process, each making a fresh output as an engine op would.
        big = mt.to_shared(torch.randn(1 << 18))
        m1 = max(100, n // 20)
        rows["torch_relu_1MiB_mxop"], rows["torch_relu_1MiB_builtin"] = _time_pair(
            lambda: tr(big), lambda: torch.relu(big), m1)
        rows["torch_relu_1MiB_ratio"] = (rows["torch_relu_1MiB_mxop"] /
                                         rows["torch_relu_1MiB_builtin"])

        tg = mt.TorchOp(gemm)
        a = mt.to_shared(torch.randn(gemm_n, gemm_n))
        b = mt.to_shared(torch.randn(gemm_n, gemm_n))
        m = max(50, n // 200)
        rows["gemm_mxop_%dx%d" % (gemm_n, gemm_n)] = _time(lambda: tg(a, b), m)
        rows["gemm_torch_%dx%d" % (gemm_n, gemm_n)] = _time(lambda: torch.mm(a, b), m)
        rows.update(_torch_call(relu, n))
    rows.update(_user_rows(relu, n))
    rows["python_layer_overhead"] = rows["numpy_relu"] - rows["c_forward"]
    rows.update(_threads(c, relu, c.load("softmax.so").softmax))
    rows.update(_python_layer_only(c, relu, x, tx if torch is not None else None, n))
    # The same stub rows through the ctypes path (what MXOP_NO_FASTCALL=1 gives),
    # in the same run, for the comparison.
    from mxop import _fast

    fc = _fast.fc
    rows["fastcall"] = 1.0 if fc else 0.0
    if torch is not None:
        from mxop import _torch_library as _tl

        rows["torchops"] = 1.0 if _tl.cpp() is not None else 0.0
    if fc:
        # torch.ops' C++ kernels off too: the torch.ops rows are then the
        # Python kernels' (what a build without _torchops.so gives).
        tops = None
        if torch is not None:
            from mxop import _torch_library as _tl

            tops = _tl.cpp()
        _fast.fc = False
        was = tops.mxop_torchops_enable(0) if tops is not None else None
        try:
            slow = _python_layer_only(c, relu, x, tx if torch is not None else None, n)
        finally:
            _fast.fc = fc
            if tops is not None:
                tops.mxop_torchops_enable(was)
        rows.update({"ctypes_" + k: v for k, v in slow.items() if k != "stub_ctypes_call"})
    c.close()
    return rows


def _time_rounds(fns, n, reps=9):
    """Medians (us per call) of each row of fns ({name: (setup, fn)}), timed
    in rounds of n calls of each, the order rotating (and reversing) every
    round so that a shared machine's drift hits all rows alike; a row's
    setup runs before each of its rounds, outside the timing."""
    keys = list(fns)
    runs = {k: [] for k in keys}
    for k in keys:
        setup, f = fns[k]
        setup()
        for _ in range(min(n, 20)):
            f()
    for r in range(reps):
        order = keys[r % len(keys):] + keys[:r % len(keys)]
        if r % 2:
            order.reverse()
        for k in order:
            setup, f = fns[k]
            setup()
            t0 = time.perf_counter()
            for _ in range(n):
                f()
            runs[k].append((time.perf_counter() - t0) / n * 1e6)
    return {k: statistics.median(v) for k, v in runs.items()}


def _user_rows(relu, n):
    """The user_* rows (see the module's doc)."""
    from mxop import allocator as al

    try:
        al.enable()
    except Exception as e:  # a libmxop or build without the allocator: no rows
        print("mxop.bench: no allocator rows (%s)" % e, file=sys.stderr)
        return {}
    al.disable()
    try:
        import torch
        import mxop.torch as mt
    except ImportError:
        torch = None
    on, off = al.enable, al.disable
    rows = {}
    rng = np.random.default_rng(3)
    for mib, calls in ((1, max(50, n // 40)), (64, max(3, n // 2000))):
        count = mib << 18
        if torch is not None:
            mt.TorchOp(relu)  # torch.ops.mxop.relu
            top = torch.ops.mxop.relu
            off()
            plain = torch.randn(count)
            shared = mt.to_shared(torch.randn(count))
            on()
            mine = torch.randn(count)
            off()
            t = _time_rounds({"inproc": (off, lambda: torch.relu(plain)),
                              "staged": (off, lambda: top(plain)),
                              "allocator": (on, lambda: top(mine)),
                              "to_shared": (off, lambda: top(shared))}, calls)
            off()
            for k, v in t.items():
                rows["user_torch_relu_%dMiB_%s" % (mib, k)] = v
                if k != "inproc":
                    rows["user_torch_relu_%dMiB_%s_ratio" % (mib, k)] = v / t["inproc"]
            del plain, shared, mine
        off()
        xp = rng.standard_normal(count, dtype=np.float32)
        yp = np.empty_like(xp)
        on()
        xa = rng.standard_normal(count, dtype=np.float32)
        off()
        t = _time_rounds({"inproc": (off, lambda: np.maximum(xp, 0, out=yp)),
                          "staged": (off, lambda: relu(xp)),
                          "allocator": (on, lambda: relu(xa))}, calls)
        off()
        for k, v in t.items():
            rows["user_numpy_relu_%dMiB_%s" % (mib, k)] = v
            if k != "inproc":
                rows["user_numpy_relu_%dMiB_%s_ratio" % (mib, k)] = v / t["inproc"]
    return rows


def _threads(c, relu, softmax, seconds=0.5, rounds=3):
    """Calls/s of relu on 4 MiB and of softmax on 64x160 (each about 100 us a
    call on one CPU; relu bound by memory bandwidth, softmax by exp()) from 1
    and from 2 threads sharing client `c` (its pool of sessions lets both
    calls be in flight at once)."""
    rows = {}
    rng = np.random.default_rng(1)
    relu_args = [(c.asarray(rng.standard_normal(1 << 20, dtype=np.float32)),) for _ in range(2)]
    sm_args = [(c.asarray(rng.standard_normal((64, 160), dtype=np.float32)),) for _ in range(2)]
    for name, op, args in (("relu_4MiB", relu, relu_args), ("softmax_64x160", softmax, sm_args)):
        one, two = _thread_rates(op, args, seconds, rounds)
        rows["threads_%s_1_per_s" % name] = one
        rows["threads_%s_2_per_s" % name] = two
        rows["threads_%s_2_vs_1_ratio" % name] = two / one
    for (x,) in relu_args:
        np.testing.assert_array_equal(relu(x), np.maximum(x, 0))
    for (x,) in sm_args:
        e = np.exp(x.astype(np.float64) - x.max(axis=-1, keepdims=True))
        np.testing.assert_allclose(softmax(x), e / e.sum(axis=-1, keepdims=True),
                                   rtol=1e-4, atol=1e-7)
    return rows


def _thread_rates(op, args, seconds, rounds):
    import threading

    def rate(k):
        counts = [0] * k
        end = time.perf_counter() + seconds

        def loop(i):
            a = args[i]
            n = 0
            while time.perf_counter() < end:
                op(*a)
                n += 1
            counts[i] = n

        t0 = time.perf_counter()
        ts = [threading.Thread(target=loop, args=(i,)) for i in range(k)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        return sum(counts) / (time.perf_counter() - t0)

    rate(2)  # warm-up: opens the sibling session
    one = two = 0.0
    for _ in range(rounds):
        one += rate(1) / rounds
        two += rate(2) / rounds
    return one, two


def torch_ops_relu():
    import torch

    return torch.ops.mxop.relu


def _python_layer_only(c, relu, x, tx, n):
    """The Python layer's own cost, free of IPC noise: the same calls with
    mxop_forward and mxop_backward replaced by a C function that returns at
    once (getpagesize, given their prototype; it ignores the arguments)."""
    from mxop._lib import lib

    stub = ctypes.CDLL(None).getpagesize
    real = lib.mxop_forward
    real_bwd = lib.mxop_backward
    stub.argtypes = real.argtypes
    stub.restype = real.restype
    rows = {}
    ent = relu.entry({})
    ib = ctypes.create_string_buffer(224)
    addr = ctypes.addressof(ib)
    h, p = c.handle, relu.pointer
    rows["stub_ctypes_call"] = _time(lambda: stub(h, p, ent.addr, addr, 1, addr, 1), n)
    lib.mxop_forward = stub
    lib.mxop_backward = stub
    from mxop import _fast

    fc = _fast.fc
    sa = ctypes.cast(stub, ctypes.c_void_p).value
    old = (fc.set_forward(sa), fc.set_backward(sa)) if fc else None
    # torch.ops.mxop's C++ kernels call libmxop without Python: stub them too.
    tops = None
    if tx is not None:
        from mxop import _torch_library as _tl

        tops = _tl.cpp()
    old_tops = (tops.mxop_torchops_set_forward(sa), tops.mxop_torchops_set_backward(sa)) \
        if tops is not None else None
    try:
        rows["stub_numpy_op_call"] = _time(lambda: relu(x), n)
        if tx is not None:
            import mxop.torch as mt

            tr = mt.TorchOp(relu)
            txg = tx.detach().requires_grad_()
            rows["stub_torch_op_nograd"] = _time(lambda: tr(tx), n)
            rows["stub_torch_op_autograd"] = _time(lambda: tr(txg), n)
            top = torch_ops_relu()
            rows["stub_torch_ops_nograd"] = _time(lambda: top(tx), n)
            rows["stub_torch_ops_autograd"] = _time(lambda: top(txg), n)
            # Forward + backward with both calls stubbed (the stub writes no
            # output: the values are garbage, the work of the layer is not).
            rows["stub_torch_op_fwd_bwd"] = _time(lambda: tr(txg).backward(tx), n // 2)
            rows["stub_torch_ops_fwd_bwd"] = _time(lambda: top(txg).backward(tx), n // 2)
    finally:
        lib.mxop_forward = real
        lib.mxop_backward = real_bwd
        if fc:
            fc.set_forward(old[0])
            fc.set_backward(old[1])
        if tops is not None:
            tops.mxop_torchops_set_forward(old_tops[0])
            tops.mxop_torchops_set_backward(old_tops[1])
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--socket", default=None,
                    help="a daemon to use (default: $MXOP_SOCKET, else a private one)")
    ap.add_argument("--n", type=int, default=None,
                    help="calls per run (default 20000 x $MXOP_BENCH_SCALE)")
    ap.add_argument("--gemm-n", type=int, default=256)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--out", default=None, help="also write the results (JSON) here")
    ap.add_argument("--torch-call", action="store_true",
                    help="only the torch_call_* rows (the cost of a call from PyTorch)")
    a = ap.parse_args(argv)
    n = a.n or max(500, int(20000 * float(os.environ.get("MXOP_BENCH_SCALE", "1"))))
    rows = run(a.socket, n, a.gemm_n, a.torch_call)
    res = {k: round(v, 2) for k, v in rows.items()}
    if a.out:
        os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
        with open(a.out, "w") as f:
            json.dump({"unit": "us/call", "n": n, "rows": res}, f, indent=1)
    if a.json:
        json.dump(res, sys.stdout, indent=1)
        print()
    else:
        for k, v in rows.items():
            unit = "x" if k.endswith("_ratio") else ("" if k in ("fastcall", "torchops") else
                                                     "calls/s" if k.endswith("_per_s") else
                                                     "us/call")
            print("%-24s %9.2f %s" % (k, v, unit))


if __name__ == "__main__":
    main()
