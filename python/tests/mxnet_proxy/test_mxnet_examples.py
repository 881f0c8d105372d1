"""MXNet's own example extension libraries (example/extensions/ of MXNet's
source, built unchanged by `make check-mxnet MXNET_SRC=...`): through
mxop's worker and through the proxy, what their test_*.py check.  Skipped
unless $MXOP_MXNET_EXAMPLES names the folder they were built into."""
import os

import numpy as np
import pytest

pytest.importorskip("mxnet")
import mxop  # noqa: E402
from test_proxy import PROXY, gone, run_script  # noqa: E402

EX = os.environ.get("MXOP_MXNET_EXAMPLES")
pytestmark = pytest.mark.skipif(not EX, reason="MXNet's examples not built (MXNET_SRC unset)")


def lib(name):
    return os.path.join(EX, name)


def test_examples_run_in_mxops_worker():
    # MXNet libraries in mxop: the same files, loaded by mxop's client.
    d = mxop.Daemon(plugin_sources=[EX])
    try:
        c = mxop.connect(d)
        c.load("libgemm_lib.so")
        c.load("libinit_lib.so")  # no ops: loads as in MXNet
        A = np.array([[1, 2, 3], [4, 5, 6]], np.float32)
        B = np.array([[7], [8], [9]], np.float32)
        np.testing.assert_array_equal(c.op("my_gemm")(A, B), A @ B)
        st = c.op("state_gemm").create_state(A, B, test_kw=100)
        np.testing.assert_array_equal(st(A, B), A @ B)
        st.close()
        c.load("libtransposecsr_lib.so")
        with pytest.raises(mxop.MxopError) as ei:
            c.op("my_transposecsr")(A)
        assert "kCSRStorage" in str(ei.value) and "not support" in str(ei.value)
        c.close()
    finally:
        assert d.stop() == 0


def test_examples_through_the_proxy_as_their_tests_do():
    # example/extensions/lib_custom_op/test_gemm.py, checked against NumPy.
    rc, out, err = run_script("""
    mx.library.load(os.environ["PROXY"], verbose=False)
    print("PIDS", *children())
    a = mx.nd.array([[1, 2, 3], [4, 5, 6]]); b = mx.nd.array([[7], [8], [9]])
    A, B = a.asnumpy(), b.asnumpy()
    assert (mx.nd.my_gemm(a, b).asnumpy() == A @ B).all()
    assert (mx.nd.state_gemm(a, b, test_kw=100).asnumpy() == A @ B).all()
    s, t = mx.sym.Variable("s"), mx.sym.Variable("t")
    for sym in (mx.sym.my_gemm(s, t), mx.sym.state_gemm(s, t, test_kw=200)):
        g = [mx.nd.empty((2, 3)), mx.nd.empty((3, 1))]
        exe = sym.bind(ctx=mx.cpu(), args={"s": a, "t": b}, args_grad=g)
        exe.forward()
        assert (exe.forward()[0].asnumpy() == A @ B).all()
        exe.backward([mx.nd.ones((2, 1))])
        dC = np.ones((2, 1), np.float32)
        assert (g[0].asnumpy() == dC @ B.T).all() and (g[1].asnumpy() == A.T @ dC).all()
    try:
        mx.nd.my_transposecsr(a).asnumpy()
    except mx.base.MXNetError as e:
        print("CSR", "kCSRStorage" in str(e), "not support" in str(e))
    print("OK")
    """, env={"PROXY": PROXY, "MXOP_MXNET_LIBS": ":".join(
        lib(n) for n in ("libgemm_lib.so", "libinit_lib.so", "libtransposecsr_lib.so"))})
    assert rc == 0, err
    assert "CSR True True" in out and "OK" in out, out
    pids = [int(p) for p in out.split("PIDS")[1].splitlines()[0].split()]
    assert gone(pids)
