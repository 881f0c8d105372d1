"""MXNet extension libraries (lib_api version 11) from NumPy and PyTorch.

The libraries are the test fixtures tests/plugins/mx_*.cc (written here, no
MXNet code): they export MXNet's C ABI, and mxop runs their ops like its own.
"""
import numpy as np
import pytest
import torch

import mxop
import mxop.torch as mt


@pytest.fixture
def mx(client):
    client.load("mx_basic.so")
    return client


def check_gemm(c):
    """my_gemm still answers correctly: the session is usable."""
    rng = np.random.default_rng(7)
    A = rng.standard_normal((3, 4)).astype(np.float32)
    B = rng.standard_normal((4, 2)).astype(np.float32)
    np.testing.assert_allclose(c.op("my_gemm")(A, B), A @ B, rtol=1e-5, atol=1e-6)


def test_gemm_forward_backward_with_attribute(mx):
    gemm = mx.op("my_gemm")
    rng = np.random.default_rng(1)
    A = rng.standard_normal((5, 3)).astype(np.float32)
    B = rng.standard_normal((3, 4)).astype(np.float32)
    C = gemm(A, B, alpha=1.5)
    np.testing.assert_allclose(C, 1.5 * A @ B, rtol=1e-5, atol=1e-5)
    dC = rng.standard_normal(C.shape).astype(np.float32)
    dA, dB = gemm.backward([dC], [A, B], [C], alpha=1.5)
    np.testing.assert_allclose(dA, 1.5 * dC @ B.T, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(dB, 1.5 * A.T @ dC, rtol=1e-5, atol=1e-5)


def test_inference_failure_names_the_library_message(mx):
    gemm = mx.op("my_gemm")
    with pytest.raises(mxop.ShapeMismatch) as ei:
        gemm(np.ones((2, 3), np.float32), np.ones((4, 2), np.float32))
    assert "inner dimensions differ: A is [2,3], B is [4,2]" in str(ei.value)
    with pytest.raises(mxop.DtypeMismatch) as ei:
        gemm(np.ones((2, 3)), np.ones((3, 2)))
    assert "must be float32" in str(ei.value)
    with pytest.raises(mxop.InvalidAttribute) as ei:
        gemm(np.ones((2, 3), np.float32), np.ones((3, 2), np.float32), alpha="x")
    assert "alpha='x' is not a number" in str(ei.value)
    check_gemm(mx)


def test_stateful_op_and_destructor(mx):
    op = mx.op("my_counter")
    assert op.stateful
    states = mx.op("my_states")
    created0, destroyed0 = states()
    x = np.arange(4, dtype=np.float32)
    st = op.create_state(x, start=5)
    np.testing.assert_array_equal(st(x), x + 5)
    np.testing.assert_array_equal(st(x), x + 6)
    assert list(states()) == [created0 + 1, destroyed0]
    st.close()
    assert list(states()) == [created0 + 1, destroyed0 + 1]


def test_mutating_op_writes_its_input(mx):
    x = np.array([1, 2, 3], np.float32)
    counter = mx.zeros((3,), np.float32)
    y = mx.op("my_mutate")(x, counter)
    np.testing.assert_array_equal(y, 2 * x)
    np.testing.assert_array_equal(counter, 1)


def test_random_states_follow_the_seed(mx):
    rnd = mx.op("my_rand")
    x = np.zeros(4096)
    a, b, c = rnd(x, seed=99), rnd(x, seed=99), rnd(x, seed=100)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    assert ((a >= 0) & (a < 1)).all()
    # 4096 uniform draws: the mean is within 0.5 +- 0.03 (over 6 sigma).
    assert abs(a.mean() - 0.5) < 0.03


def test_exception_ends_only_the_worker(mx):
    mx.load("mx_throw.so")
    for name in ("throw_forward", "throw_arity"):
        with pytest.raises(mxop.WorkerCrashed) as ei:
            mx.op(name)(np.zeros(4, np.float32))
        assert name in str(ei.value)
        check_gemm(mx)


def test_other_version_partitioner_and_sparse_are_refused(mx):
    with pytest.raises(mxop.AbiMismatch) as ei:
        mx.load("mx_v10.so")
    assert "lib_api version 10" in str(ei.value)
    with pytest.raises(mxop.NotSupported) as ei:
        mx.load("mx_part.so")
    assert "partitioner" in str(ei.value)
    mx.load("mx_sparse.so")
    with pytest.raises(mxop.NotSupported) as ei:
        mx.op("sparse_transpose")(np.ones(3, np.float32))
    assert "CSR" in str(ei.value)
    np.testing.assert_array_equal(mx.op("dense_negate")(np.ones(3, np.float32)), -1)
    check_gemm(mx)


def test_torch_autograd_through_mxnet_op(mx):
    gemm = mt.op("my_gemm", mx)
    A = torch.randn(3, 4, requires_grad=True)
    B = torch.randn(4, 5, requires_grad=True)
    C = gemm(A, B, alpha=2.0)
    A2 = A.detach().clone().requires_grad_()
    B2 = B.detach().clone().requires_grad_()
    C2 = 2.0 * A2 @ B2
    torch.testing.assert_close(C, C2)
    g = torch.randn_like(C2)
    C.backward(g)
    C2.backward(g)
    torch.testing.assert_close(A.grad, A2.grad)
    torch.testing.assert_close(B.grad, B2.grad)


def test_torch_stateful_and_crash_recovery(mx):
    st = mt.op("my_counter", mx).create_state(torch.zeros(3), start=1)
    x = torch.arange(3, dtype=torch.float32, requires_grad=True)
    y = st(x)
    torch.testing.assert_close(y, x.detach() + 1)
    y.sum().backward()
    assert (x.grad == 1).all()
    st.close()
    mx.load("mx_throw.so")
    with pytest.raises(mxop.WorkerCrashed):
        mt.op("throw_forward", mx)(torch.zeros(2))
    # The session goes on: the library's other ops run on the new worker.
    torch.testing.assert_close(mt.op("my_gemm", mx)(torch.eye(2), torch.ones(2, 2)),
                               torch.ones(2, 2))


def test_attributes_reach_the_library_as_mxnet_sends_them(mx):
    # MXNet passes str(v): a library comparing with "True" or "1.0" must see that.
    op = mx.op("my_attrs")
    got = bytes(op(flag=True, off=False, x=1.0, n=3, l=[1, 2], t=(3, 4), s="abc"))
    assert got == b"flag=True;l=[1, 2];n=3;off=False;s=abc;t=(3, 4);x=1.0;"
    # 1, 1.0 and True are one dict key, but three strings for MXNet.
    assert bytes(op(v=1)) == b"v=1;"
    assert bytes(op(v=1.0)) == b"v=1.0;"
    assert bytes(op(v=True)) == b"v=True;"
    # Through the torch binding too (it builds its calls with the same function).
    t = mt.op("my_attrs", mx)(flag=True, x=1.0)
    assert bytes(t.numpy()) == b"flag=True;x=1.0;"
