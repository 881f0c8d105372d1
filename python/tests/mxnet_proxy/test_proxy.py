"""MXNet calls mxop: libmxop_mxnet.so loaded with mx.library.load.

Run in MXNet 1.9.1's own virtual environment (make check-mxnet); skipped
where MXNet is not installed.  What MXNet's extension tests check
(tests/python/unittest/test_extensions.py, example/extensions/
lib_custom_op/test_*.py: forward and backward against a reference,
stateful ops and their counters, symbolic and Gluon hybridized use), here
through the proxy, with an MXNet-ABI library written here
(tests/plugins/mx_basic.cc, mx_proxy.cc) and mxop's own ops (plugins/).

The proxy is loaded once into this process (a private daemon); the tests
that need a process of their own (a training run that crashes its op, the
clean-up at exit, a shared daemon, a bad configuration) run one.
"""
import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

mx = pytest.importorskip("mxnet")
from mxnet.base import MXNetError  # noqa: E402

from conftest import BUILD  # noqa: E402

PROXY = os.path.join(BUILD, "lib", "libmxop_mxnet.so")
LIBS = [os.path.join(BUILD, "tests", "plugins", "mx_basic.so"),
        os.path.join(BUILD, "tests", "plugins", "mx_proxy.so"),
        os.path.join(BUILD, "plugins", "gemm.so"),
        os.path.join(BUILD, "plugins", "running_mean.so")]


@pytest.fixture(scope="module")
def proxy():
    os.environ["MXOP_MXNET_LIBS"] = ":".join(LIBS)
    os.environ.pop("MXOP_SOCKET", None)
    try:
        mx.library.load(PROXY, verbose=False)
    finally:
        del os.environ["MXOP_MXNET_LIBS"]
    return mx


def counts():
    created, destroyed, forwards, kw = mx.nd.gemm_counts().asnumpy().tolist()
    return created, destroyed, forwards, kw


def rand(shape, seed):
    return np.random.default_rng(seed).uniform(-10, 10, shape).astype(np.float32)


# ---- forward and backward against NumPy (test_gemm.py, test_relu.py) ----

def test_gemm_forward_backward_match_numpy(proxy):
    A, B = rand((2, 3), 1), rand((3, 4), 2)
    a, b = mx.nd.array(A), mx.nd.array(B)
    for name in ("my_gemm", "gemm"):  # an MXNet-ABI op and an mxop-ABI op
        a.attach_grad()
        b.attach_grad()
        with mx.autograd.record():
            c = getattr(mx.nd, name)(a, b)
        dC = rand(c.shape, 3)
        c.backward(mx.nd.array(dC))
        np.testing.assert_allclose(c.asnumpy(), A @ B, rtol=1e-4, atol=1e-4, err_msg=name)
        np.testing.assert_allclose(a.grad.asnumpy(), dC @ B.T, rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(b.grad.asnumpy(), A.T @ dC, rtol=1e-4, atol=1e-4)


def test_attributes_arrive_as_mxnet_passes_them(proxy):
    A, B = rand((3, 2), 4), rand((4, 2), 5)
    # mxop's gemm reads transpose_b as a bool: MXNet sends str(True) = "True".
    c = mx.nd.gemm(mx.nd.array(A), mx.nd.array(B), transpose_b=True, alpha=0.5)
    np.testing.assert_allclose(c.asnumpy(), 0.5 * A @ B.T, rtol=1e-4, atol=1e-4)
    got = bytes(mx.nd.my_attrs(flag=True, x=1.0, l=(2, 3)).asnumpy().tobytes())
    assert got == b"flag=True;l=(2, 3);x=1.0;"


def test_relu_backward_and_ops_of_both_abis_listed(proxy):
    for name in ("my_gemm", "state_gemm", "crashy_relu", "gemm", "running_mean_norm"):
        assert hasattr(mx.nd, name) and hasattr(mx.sym, name), name
    X = rand((5, 6), 6)
    x = mx.nd.array(X)
    x.attach_grad()
    with mx.autograd.record():
        y = mx.nd.crashy_relu(x)
    y.backward(mx.nd.ones_like(y))
    np.testing.assert_array_equal(y.asnumpy(), np.maximum(X, 0))
    np.testing.assert_array_equal(x.grad.asnumpy(), (X > 0).astype(np.float32))


# ---- symbolic use and stateful ops (test_extensions.py::test_custom_op) ----

def test_symbolic_gemm_and_stateful_gemm_match_mxnet(proxy):
    s, t = mx.sym.Variable("s"), mx.sym.Variable("t")
    c = mx.sym.my_gemm(s, t)
    d = mx.sym.state_gemm(s, t, test_kw=200)
    base = mx.sym.linalg.gemm2(s, t)
    n, k, m = 3, 4, 2
    mat1 = mx.nd.random.uniform(-10, 10, shape=(n, k))
    mat2 = mx.nd.random.uniform(-10, 10, shape=(k, m))
    grads = [[mx.nd.empty((n, k)), mx.nd.empty((k, m))] for _ in range(3)]
    created0, destroyed0, forwards0, _ = counts()
    exe1 = c.bind(ctx=mx.cpu(), args={"s": mat1, "t": mat2}, args_grad=grads[0])
    exe2 = d.bind(ctx=mx.cpu(), args={"s": mat1, "t": mat2}, args_grad=grads[1])
    exe3 = base.bind(ctx=mx.cpu(), args={"s": mat1, "t": mat2}, args_grad=grads[2])
    out1 = exe1.forward()
    out2 = exe2.forward()
    out2 = exe2.forward()  # the stateful op twice: one instance, its counter at 2
    out3 = exe3.forward()
    np.testing.assert_allclose(out1[0].asnumpy(), out3[0].asnumpy(), rtol=1e-3, atol=1e-3)
    np.testing.assert_allclose(out2[0].asnumpy(), out3[0].asnumpy(), rtol=1e-3, atol=1e-3)
    created, _, forwards, kw = counts()
    assert created == created0 + 1, "one state for the bound graph node"
    assert forwards == forwards0 + 2
    assert kw == 200, "the attribute reached CreateOpState"
    out_grad = mx.nd.ones((n, m))
    for e in (exe1, exe2, exe3):
        e.backward([out_grad])
    for g in (grads[0], grads[1]):
        np.testing.assert_allclose(g[0].asnumpy(), grads[2][0].asnumpy(), rtol=1e-3, atol=1e-3)
        np.testing.assert_allclose(g[1].asnumpy(), grads[2][1].asnumpy(), rtol=1e-3, atol=1e-3)
    del exe2
    mx.nd.waitall()
    assert counts()[1] >= destroyed0 + 1, "the state's destructor ran when MXNet dropped it"


def test_mxop_stateful_op_keeps_its_state(proxy):
    # running_mean_norm: y = x - running mean, the mean kept in the instance.
    x = mx.sym.Variable("x")
    y = mx.sym.running_mean_norm(x, momentum=0.5)
    X1, X2 = rand((4, 3), 7), rand((4, 3), 8)
    arg = mx.nd.array(X1)
    exe = y.bind(ctx=mx.cpu(), args={"x": arg})
    np.testing.assert_allclose(exe.forward()[0].asnumpy(), X1 - X1.mean(0), rtol=1e-4, atol=1e-4)
    arg[:] = X2
    mean = 0.5 * X1.mean(0) + 0.5 * X2.mean(0)
    np.testing.assert_allclose(exe.forward()[0].asnumpy(), X2 - mean, rtol=1e-4, atol=1e-4)


def test_gluon_hybridized_matches_reference(proxy):
    class Net(mx.gluon.HybridBlock):
        def __init__(self, custom):
            super().__init__()
            self.custom = custom
            with self.name_scope():
                self.w = self.params.get("w", shape=(4, 3), init=mx.init.Constant(0.25))

        def hybrid_forward(self, F, x, w):
            if self.custom:
                h = F.state_gemm(x, w, test_kw=7)
                return F.crashy_relu(F.my_gemm(h, F.transpose(w)))
            return F.relu(F.dot(F.dot(x, w), F.transpose(w)))

    X = rand((5, 4), 9)
    results = []
    for custom in (True, False):
        net = Net(custom)
        net.initialize()
        net.hybridize()
        x = mx.nd.array(X)
        with mx.autograd.record():
            y = net(x)
        y.backward()
        results.append((y.asnumpy(), net.w.grad().asnumpy()))
    np.testing.assert_allclose(results[0][0], results[1][0], rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(results[0][1], results[1][1], rtol=1e-4, atol=1e-3)
    assert counts()[3] == 7


# ---- what mxop adds: in-place inputs, seeds, errors, crashes ----

def test_mutated_input_is_written_in_place(proxy):
    x = mx.nd.array(np.arange(5, dtype=np.float32))
    counter = mx.nd.zeros((5,))
    y = mx.nd.my_mutate(x, counter)
    y = mx.nd.my_mutate(x, counter)
    np.testing.assert_array_equal(y.asnumpy(), 2 * np.arange(5))
    np.testing.assert_array_equal(counter.asnumpy(), 2)


def test_random_numbers_follow_mx_random_seed(proxy):
    x = mx.nd.zeros((2048,), dtype="float64")
    mx.random.seed(11)
    a = mx.nd.my_rand(x).asnumpy()
    mx.random.seed(11)
    b = mx.nd.my_rand(x).asnumpy()
    mx.random.seed(12)
    c = mx.nd.my_rand(x).asnumpy()
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    assert ((a >= 0) & (a < 1)).all()


def test_errors_are_mxnet_errors_naming_op_and_cause(proxy):
    with pytest.raises(MXNetError) as ei:
        mx.nd.my_gemm(mx.nd.ones((2, 3)), mx.nd.ones((4, 2))).asnumpy()
    msg = str(ei.value)
    assert "my_gemm" in msg and "inner dimensions differ" in msg, msg
    with pytest.raises(MXNetError) as ei:
        mx.nd.gemm(mx.nd.ones((2, 3)), mx.nd.ones((3, 2)), alpha="lots").asnumpy()
    assert "alpha" in str(ei.value) and "lots" in str(ei.value), str(ei.value)
    # Still serving.
    np.testing.assert_allclose(mx.nd.my_gemm(mx.nd.ones((2, 3)), mx.nd.ones((3, 2))).asnumpy(), 3)


def test_crash_is_an_mxnet_error_and_the_next_call_works(proxy):
    # A bound stateful op whose instance dies with the worker.
    a, b = rand((2, 3), 10), rand((3, 2), 11)
    s, t = mx.sym.Variable("s"), mx.sym.Variable("t")
    exe = mx.sym.state_gemm(s, t).bind(ctx=mx.cpu(), args={"s": mx.nd.array(a),
                                                           "t": mx.nd.array(b)})
    np.testing.assert_allclose(exe.forward()[0].asnumpy(), a @ b, rtol=1e-4, atol=1e-4)
    created = counts()[0]
    x = mx.nd.array([1.0, -12345.0, 2.0])
    with pytest.raises(MXNetError) as ei:
        mx.nd.crashy_relu(x).asnumpy()
    msg = str(ei.value)
    assert "crashy_relu" in msg and "SIGSEGV" in msg and "MXOP_EWORKER_CRASHED" in msg, msg
    np.testing.assert_array_equal(mx.nd.crashy_relu(mx.nd.array([-1.0, 2.0])).asnumpy(), [0, 2])
    # The bound stateful op after the crash: made again in the new worker at its next call.
    np.testing.assert_allclose(exe.forward()[0].asnumpy(), a @ b, rtol=1e-4, atol=1e-4)
    assert counts()[0] == 1, "the new worker's library has made one instance: the re-made one"
    assert created >= 1


# ---- processes of their own ----

def run_script(body, env=None, timeout=120):
    """Runs `body` in a fresh interpreter of this environment; returns (rc, stdout, stderr)."""
    e = dict(os.environ)
    e.pop("MXOP_SOCKET", None)
    e["MXOP_MXNET_LIBS"] = ":".join(LIBS)
    e.update(env or {})
    head = "import os, sys, numpy as np, mxnet as mx\n" + CHILDREN
    p = subprocess.run([sys.executable, "-c", head + textwrap.dedent(body)], env=e,
                       capture_output=True, text=True, timeout=timeout)
    return p.returncode, p.stdout, p.stderr


CHILDREN = """
def children():
    # This process's children (the private daemon), from every thread.
    out = []
    for t in os.listdir("/proc/self/task"):
        with open("/proc/self/task/%s/children" % t) as f:
            out += [int(p) for p in f.read().split()]
    return out
"""


def gone(pids, within=10.0):
    end = time.monotonic() + within
    while time.monotonic() < end:
        left = [p for p in pids if os.path.exists("/proc/%d" % p)
                and open("/proc/%d/stat" % p).read().split(") ")[1][0] != "Z"]
        if not left:
            return True
        time.sleep(0.05)
    return False


def test_gluon_training_with_a_crash_trains_on_and_leaves_nothing_running():
    rc, out, err = run_script("""
    mx.library.load(os.environ["PROXY"], verbose=False)
    print("PIDS", *children())
    mx.random.seed(1)
    rng = np.random.default_rng(0)
    X = rng.standard_normal((64, 8)).astype(np.float32)
    Y = (X @ rng.standard_normal((8, 1)).astype(np.float32)).clip(0, None)

    class Net(mx.gluon.HybridBlock):
        def __init__(self):
            super().__init__()
            with self.name_scope():
                self.fc1 = mx.gluon.nn.Dense(16)
                self.fc2 = mx.gluon.nn.Dense(1)
        def hybrid_forward(self, F, x, keep, poison):
            # keep 1, poison 0: h exactly; keep 0, poison -12345: the op's crash value.
            h = F.broadcast_add(F.broadcast_mul(self.fc1(x), keep), poison)
            return self.fc2(F.crashy_relu(h))

    net = Net()
    net.initialize(mx.init.Xavier())
    net.hybridize()
    trainer = mx.gluon.Trainer(net.collect_params(), "adam", {"learning_rate": 0.01})
    loss_fn = mx.gluon.loss.L2Loss()
    losses, crashes = [], 0
    for step in range(60):
        x, y = mx.nd.array(X), mx.nd.array(Y)
        bad = step == 20  # a poisoned batch: the op's worker dies on it
        keep, poison = mx.nd.array([0.0 if bad else 1.0]), mx.nd.array([-12345.0 if bad else 0.0])
        try:
            with mx.autograd.record():
                loss = loss_fn(net(x, keep, poison), y)
            loss.wait_to_read()
            loss.backward()
            trainer.step(64)
            losses.append(float(loss.mean().asscalar()))
        except mx.base.MXNetError as e:
            assert "crashy_relu" in str(e) and "SIGSEGV" in str(e), str(e)
            crashes += 1
    print("CRASHES", crashes)
    print("LOSS", losses[0], losses[-1], len(losses))
    """, env={"PROXY": PROXY})
    assert rc == 0, err
    lines = dict(l.split(" ", 1) for l in out.splitlines() if " " in l)
    assert lines["CRASHES"] == "1", out
    first, last, n = lines["LOSS"].split()
    assert int(n) == 59, out
    assert float(last) < 0.5 * float(first), "training did not go on after the crash: " + out
    pids = [int(p) for p in lines["PIDS"].split()]
    assert pids, "no private daemon was started"
    assert gone(pids), "the private daemon outlived the process: %s" % pids
    assert not [d for d in os.listdir("/tmp") if d.startswith("mxop-mxnet-")
                and os.stat("/tmp/" + d).st_mtime > time.time() - 300
                and any(str(p) in d for p in pids)]


def test_shared_daemon_from_mxop_socket(daemon):
    # With MXOP_SOCKET the libraries are names in that daemon's plugin directory.
    rc, out, err = run_script("""
    mx.library.load(os.environ["PROXY"], verbose=False)
    a = mx.nd.array([[1, 2], [3, 4]])
    print("OUT", *mx.nd.gemm(a, a, transpose_b=True).asnumpy().ravel().tolist())
    """, env={"PROXY": PROXY, "MXOP_SOCKET": daemon.socket,
              "MXOP_MXNET_LIBS": "mx_basic.so,gemm.so"})
    assert rc == 0, err
    assert out.split("OUT ")[1].split() == ["5.0", "11.0", "11.0", "25.0"], out


def test_config_file_and_prefix(tmp_path):
    cfg = tmp_path / "proxy.conf"
    cfg.write_text("# the proxy's libraries\nlibrary %s\nprefix mxop_\n" % LIBS[2])
    rc, out, err = run_script("""
    mx.library.load(os.environ["PROXY"], verbose=False)
    print("HAS", hasattr(mx.nd, "mxop_gemm"), hasattr(mx.nd, "my_gemm"))
    """, env={"PROXY": PROXY, "MXOP_MXNET_LIBS": "", "MXOP_MXNET_CONFIG": str(cfg)})
    assert rc == 0, err
    assert "HAS True False" in out, out


def test_bad_configuration_is_an_mxnet_error_at_load():
    rc, out, err = run_script("""
    try:
        mx.library.load(os.environ["PROXY"], verbose=False)
    except mx.base.MXNetError as e:
        print("ERR", str(e).replace("\\n", " "))
    print("PIDS", *children())
    """, env={"PROXY": PROXY, "MXOP_MXNET_LIBS": "/nonexistent/lib.so"})
    assert rc == 0, err
    assert "/nonexistent/lib.so" in out and "Library failed to initialize" in out, out
    assert out.split("PIDS")[1].split() == [], "a daemon was left running: " + out


def proxy_stats():
    import ctypes
    lib = ctypes.CDLL(PROXY)  # the handle MXNet opened
    z, s, r = ctypes.c_uint64(), ctypes.c_uint64(), ctypes.c_uint32()
    lib.mxop_mxnet_proxy_stats(ctypes.byref(z), ctypes.byref(s), ctypes.byref(r))
    return z.value, s.value, r.value


def test_cpu_shared_arrays_are_not_copied(proxy):
    n = 1 << 18  # 1 MiB of f32
    X = np.linspace(-1, 1, n, dtype=np.float32)
    z0, s0, _ = proxy_stats()
    x, y = mx.nd.array(X), mx.nd.zeros((n,))
    mx.nd.crashy_relu(x, out=y).wait_to_read()
    z1, s1, _ = proxy_stats()
    assert (z1 - z0, s1 - s0) == (0, 2 * 4 * n), "cpu arrays are staged"
    xs = mx.nd.array(X, ctx=mx.Context("cpu_shared"))
    ys = mx.nd.zeros((n,), ctx=mx.Context("cpu_shared"))
    mx.nd.crashy_relu(xs, out=ys).wait_to_read()
    z2, s2, regions = proxy_stats()
    assert (z2 - z1, s2 - s1) == (2 * 4 * n, 0), "cpu_shared arrays travel as regions"
    assert regions >= 2
    np.testing.assert_array_equal(ys.asnumpy(), np.maximum(X, 0))
    # In place into MXNet's shared memory, backward too.
    xs.attach_grad()
    with mx.autograd.record():
        out = mx.nd.crashy_relu(xs)
    out.backward(mx.nd.ones((n,), ctx=mx.Context("cpu_shared")))
    np.testing.assert_array_equal(xs.grad.asnumpy(), (X > 0).astype(np.float32))
    # Arrays MXNet freed lose their registration at a later lookup: no growth.
    del xs, ys, out
    for _ in range(20):
        a = mx.nd.array(X, ctx=mx.Context("cpu_shared"))
        mx.nd.crashy_relu(a).wait_to_read()
        del a
    assert proxy_stats()[2] <= 8, proxy_stats()


def test_hang_is_an_mxnet_error_after_the_configured_deadline():
    rc, out, err = run_script("""
    mx.library.load(os.environ["PROXY"], verbose=False)
    try:
        mx.nd.crashy_relu(mx.nd.array([1.0, -54321.0])).asnumpy()
    except mx.base.MXNetError as e:
        print("ERR", "crashy_relu" in str(e), "MXOP_ETIMEOUT" in str(e))
    print("NEXT", *mx.nd.crashy_relu(mx.nd.array([-1.0, 3.0])).asnumpy().tolist())
    """, env={"PROXY": PROXY, "MXOP_MXNET_TIMEOUT_MS": "1500"})
    assert rc == 0, err
    assert "ERR True True" in out and "NEXT 0.0 3.0" in out, out + err
