"""The NumPy layer: ops on arrays, inference, stateful ops, shared memory."""
import gc

import numpy as np
import pytest

import mxop
from mxop.client import block_of

from conftest import staged


def softmax_ref(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def test_relu_forward_backward(ops):
    relu = ops.op("relu")
    x = np.array([[-1.5, 0.0, 2.0], [3.0, -4.0, 0.5]], np.float64)
    y = relu(x)
    assert y.dtype == np.float64 and y.shape == x.shape
    np.testing.assert_array_equal(y, np.maximum(x, 0))
    dy = np.arange(6, dtype=np.float64).reshape(2, 3)
    dx = relu.backward([dy], [x], [y])
    np.testing.assert_array_equal(dx, dy * (x > 0))


@pytest.mark.parametrize("ta", [False, True])
@pytest.mark.parametrize("tb", [False, True])
def test_gemm_transposes(ops, ta, tb):
    gemm = ops.op("gemm")
    rng = np.random.default_rng(1)
    A = rng.standard_normal((4, 3) if ta else (3, 4))
    B = rng.standard_normal((5, 4) if tb else (4, 5))
    opA = A.T if ta else A
    opB = B.T if tb else B
    C = gemm(A, B, transpose_a=ta, transpose_b=tb, alpha=0.5)
    np.testing.assert_allclose(C, 0.5 * opA @ opB, rtol=1e-12)
    dC = rng.standard_normal(C.shape)
    dA, dB = gemm.backward([dC], [A, B], [C], transpose_a=ta, transpose_b=tb, alpha=0.5)
    dopA = 0.5 * dC @ opB.T
    dopB = 0.5 * opA.T @ dC
    np.testing.assert_allclose(dA, dopA.T if ta else dopA, rtol=1e-12)
    np.testing.assert_allclose(dB, dopB.T if tb else dopB, rtol=1e-12)


def test_softmax_and_needs(ops):
    sm = ops.op("softmax")
    x = np.random.default_rng(2).standard_normal((3, 7)).astype(np.float32) * 50
    y = sm(x)
    np.testing.assert_allclose(y, softmax_ref(x.astype(np.float64)), rtol=1e-5, atol=1e-7)
    assert np.isfinite(y).all()
    dy = np.ones_like(y)
    dx = sm.backward([dy], [x], [y])
    np.testing.assert_allclose(dx, 0, atol=1e-6)
    assert sm.backward([dy], [x], [y], needs=[False]) is None


def test_variadic_sum_n(ops):
    s = ops.op("sum_n")
    xs = [np.full((2, 2), i, np.float32) for i in range(1, 5)]
    np.testing.assert_array_equal(s(*xs), np.full((2, 2), 10, np.float32))
    grads = s.backward([np.ones((2, 2), np.float32)], xs, [s(*xs)])
    assert len(grads) == 4 and all((g == 1).all() for g in grads)


def test_infer(ops):
    gemm = ops.op("gemm")
    assert gemm.infer(((3, 4), "f32"), ((5, 4), "f32"), transpose_b=True) == [("f32", (3, 5))]
    assert ops.op("relu").infer(np.zeros((2, 0, 3))) == [("f64", (2, 0, 3))]


def test_out_argument_and_empty_arrays(ops):
    relu = ops.op("relu")
    x = ops.asarray(np.array([-1.0, 1.0], np.float32))
    y = ops.empty(2)
    assert relu(x, out=y) is y
    np.testing.assert_array_equal(y, [0, 1])
    e = relu(np.zeros((0, 4), np.float32))
    assert e.shape == (0, 4)
    s = relu(np.array(-2.0))  # 0-d
    assert s.shape == () and s == 0


def test_outputs_view_shared_memory_and_stay_alive(ops):
    relu = ops.op("relu")
    live = ops._live
    y = relu(np.ones((4, 4), np.float32))
    assert ops._live == live + 1
    assert block_of(y) is not None and ops.owns(y)
    v = y[1:3]  # a view keeps the block
    del y
    gc.collect()
    assert ops._live == live + 1
    np.testing.assert_array_equal(v, 1)
    del v
    gc.collect()
    assert ops._live == live


def test_zero_copy_for_shared_arrays_staging_for_others(ops):
    relu = ops.op("relu")
    x = ops.zeros((64, 64), np.float32)
    x[:] = 1
    relu(x)  # warm: inference cached
    s0 = staged(ops)
    y = relu(x)
    z = relu(y)  # an op output is shared memory too
    relu(x[8:16])  # a contiguous slice of an allocation
    assert staged(ops) == s0, "shared-memory arrays were copied"
    h = np.ones((64, 64), np.float32)
    relu(h)
    assert staged(ops) == s0 + h.nbytes  # one copy in
    np.testing.assert_array_equal(z, 1)


def test_non_contiguous_input_is_copied_once_into_shared_memory(ops):
    relu = ops.op("relu")
    x = np.arange(12, dtype=np.float64).reshape(3, 4) - 5
    s0, n0 = staged(ops), ops.staged_copies
    y = relu(x.T)
    np.testing.assert_array_equal(y, np.maximum(x.T, 0))
    assert ops.staged_copies == n0 + 1
    assert staged(ops) == s0


def test_region_create_arrays_pass_without_copy(ops):
    r = ops.region_create(1 << 16)
    a = r.array((16, 16), np.float32)
    a[:] = -1
    relu = ops.op("relu")
    relu(a)
    s0 = staged(ops)
    y = relu(a)
    assert staged(ops) == s0
    np.testing.assert_array_equal(y, 0)
    r.release()


def test_register_fd_at_a_mapping_of_ours_passes_arrays_without_copy(ops):
    import mmap
    import os

    n = 1 << 16
    fd = os.memfd_create("mxop-test")
    try:
        os.ftruncate(fd, n)
        mm = mmap.mmap(fd, n)
        a = np.frombuffer(mm, np.float32, count=256).reshape(16, 16)
        base = a.__array_interface__["data"][0]
        assert not ops.owns(a)
        r = ops.register_fd(fd, n, base=base)
        assert r.base == base and ops.owns(a) and ops.region_of(base + 64, 4) == (r.id, 64)
        a[:] = -1
        relu = ops.op("relu")
        relu(a)
        s0 = staged(ops)
        y = relu(a)
        assert staged(ops) == s0
        np.testing.assert_array_equal(y, 0)
        r.release()
        assert not ops.owns(a)
        del a, y
        mm.close()
    finally:
        os.close(fd)


def test_register_fd_mapped_here(ops):
    import os

    n = 1 << 16
    fd = os.memfd_create("mxop-test")
    try:
        os.ftruncate(fd, n)
        r = ops.register_fd(fd, n, map_here=True)
        a = r.array((4,), np.float64)
        a[:] = [-1, 2, -3, 4]
        assert ops.owns(a)
        np.testing.assert_array_equal(ops.op("relu")(a), [0, 2, 0, 4])
        del a
        r.release()
    finally:
        os.close(fd)


def test_module_level_empty_uses_default_client(daemon, monkeypatch):
    monkeypatch.setenv("MXOP_SOCKET", daemon.socket)
    monkeypatch.setattr(mxop, "_default", None)
    a = mxop.zeros((3,), "f64")
    assert a.dtype == np.float64 and (a == 0).all()
    assert mxop.default_client().owns(a)


def test_bound_op(ops):
    g = ops.op("gemm").bind(transpose_b=True)
    A = np.ones((2, 3), np.float32)
    np.testing.assert_array_equal(g(A, A), np.full((2, 2), 3, np.float32))


def test_stateful_running_mean(ops):
    op = ops.op("running_mean_norm")
    assert op.stateful
    x1 = np.array([[1.0, 2.0], [3.0, 4.0]])
    x2 = np.array([[5.0, 6.0], [7.0, 8.0]])
    with op.create_state(x1, momentum=0.5) as st:
        y1 = st(x1)
        np.testing.assert_allclose(y1, x1 - [2.0, 3.0])
        y2 = st(x2)  # mean = 0.5 * [2, 3] + 0.5 * [6, 7] = [4, 5]
        np.testing.assert_allclose(y2, x2 - [4.0, 5.0])
        dx = st.backward([np.ones_like(y2)], [x2], [y2])
        np.testing.assert_array_equal(dx, 1)
        # A second instance starts afresh: states are separate objects.
        st2 = op.create_state(((7, 2), "f64"))
        np.testing.assert_allclose(st2(x2), x2 - [6.0, 7.0])
        st2.close()
    assert st.id == 0
    with pytest.raises(mxop.InvalidArgument):
        st(x1)


def test_state_lost_after_crash_and_recreate(ops):
    op = ops.op("running_mean_norm")
    st = op.create_state(((2,), "f64"))
    st(np.array([1.0, 2.0]))
    with pytest.raises(mxop.WorkerCrashed):
        ops.op("segv")(np.zeros(4, np.float32))
    with pytest.raises(mxop.StateLost) as ei:
        st(np.array([1.0, 2.0]))
    assert ei.value.code == -1022
    st.recreate()
    np.testing.assert_allclose(st(np.array([1.0, 2.0])), 0)
    st.close()


def test_arrays_survive_a_worker_crash(ops):
    relu = ops.op("relu")
    x = ops.asarray(np.array([-1.0, 3.0]))
    y = relu(x)
    with pytest.raises(mxop.WorkerCrashed):
        ops.op("segv")(np.zeros(4, np.float32))
    np.testing.assert_array_equal(relu(y), [0, 3])  # regions re-mapped in the new worker


def test_library_object_and_ops_listing(client):
    lib = client.load("relu.so")
    assert lib.relu is client.op("relu") and "relu" in client.ops()
    assert client.load("relu.so").relu is lib.relu  # a second load is a no-op
    assert client.relu is lib.relu


def test_close_with_live_arrays_keeps_memory(daemon):
    c = mxop.connect(daemon)
    relu = c.load("relu.so").relu
    y = relu(np.ones(8, np.float32))
    c.close()
    assert c.closed
    with pytest.raises(mxop.Disconnected):
        relu(y)
    np.testing.assert_array_equal(y, 1)  # still mapped
    del y
    gc.collect()
    assert c._h is None  # the session ended with its last array


def test_stats(ops):
    keep = ops.zeros(4)  # the arena's first region
    st = ops.stats()
    assert st.worker_pid > 0 and st.daemon_sessions >= 1 and st.regions >= 1
    assert set(st._asdict()) >= {"calls", "errors", "staged_bytes", "worker_restarts"}
    del keep


def test_threads_share_one_client(ops):
    import threading

    relu = ops.op("relu")
    errors = []

    def work(k):
        try:
            for i in range(150):
                x = np.full(32, float(k * 1000 + i) * (-1) ** i, np.float64)
                np.testing.assert_array_equal(relu(x), np.maximum(x, 0))
        except Exception as e:  # reported below
            errors.append(e)

    ts = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors, errors[0]


def test_many_calls_reuse_the_arena(ops):
    relu = ops.op("relu")
    x = ops.zeros((256,))
    relu(x)
    gc.collect()
    live, regions = ops._live, ops.stats().regions
    for _ in range(2000):
        relu(x)
    gc.collect()
    assert ops._live == live
    assert ops.stats().regions == regions


# ---- declared attributes -----------------------------------------------------


def _echo(client):
    client.load("opkit_attrs.so")
    return client.op("attrs_echo")


def test_declared_attrs_listed(ops):
    sm = ops.op("softmax")
    assert sm.attrs == (("axis", "int", -1, False, sm.attrs[0].doc),)
    assert sm.attrs[0].name == "axis" and sm.attrs[0].default == -1
    gemm = ops.op("gemm")
    assert [(a.name, a.type, a.default) for a in gemm.attrs] == [
        ("transpose_a", "bool", False), ("transpose_b", "bool", False), ("alpha", "float", 1.0)]
    echo = _echo(ops)
    by = {a.name: a for a in echo.attrs}
    assert by["k"].required and by["k"].default is None and by["k"].doc == "how many"
    assert by["sizes"].type == "int_list" and by["sizes"].default == (1, 2, 3)
    assert by["weights"].type == "float_list" and by["weights"].default is None
    assert ops.op("relu").attrs == ()


def test_declared_attr_unknown_key(ops):
    x = np.ones((2, 3), np.float32)
    with pytest.raises(mxop.InvalidAttribute) as ei:
        ops.op("softmax")(x, dim=0)
    msg = str(ei.value)
    assert "softmax" in msg and "'dim'" in msg and "axis (int" in msg


@pytest.mark.parametrize("key,value", [("k", "x"), ("scale", "fast"), ("flag", "maybe"),
                                       ("sizes", "1,two"), ("weights", "a,b"),
                                       # Python floats that are not finite.
                                       ("scale", float("nan")), ("scale", float("inf")),
                                       ("scale", float("-inf")), ("weights", [0.5, float("nan")])])
def test_declared_attr_wrong_type(ops, key, value):
    echo = _echo(ops)
    kw = {"k": 1, key: value}
    with pytest.raises(mxop.InvalidAttribute) as ei:
        echo(np.zeros(4, np.float32), **kw)
    msg = str(ei.value)
    assert "attrs_echo" in msg and "'%s'" % key in msg and "it knows" in msg


def test_declared_attr_missing_required(ops):
    echo = _echo(ops)
    with pytest.raises(mxop.InvalidAttribute) as ei:
        echo(np.zeros(4, np.float32), scale=1.0)
    assert "required attribute 'k'" in str(ei.value)


def test_declared_attr_defaults_and_lists(ops):
    echo = _echo(ops)
    y = echo(np.zeros(4, np.float32), k=9)
    np.testing.assert_array_equal(y[:9], [9, 2.5, 1, 3, ord("s"), 3, 1, 2, 3])
    y = echo(np.zeros(4, np.float32), k=1, sizes=(4, 5), weights=[0.5, 2.0], flag=False)
    np.testing.assert_array_equal(y[[2, 5, 6, 7, 9, 10, 11]], [0, 2, 4, 5, 2, 0.5, 2.0])


# ---- in-place ops --------------------------------------------------------------


def _inplace(client):
    client.load("opkit_inplace.so")
    return client.op("double_inplace")


def test_inplace_contiguous_updated(ops):
    op = _inplace(ops)
    x = np.arange(6, dtype=np.float64)
    y = op(x)
    np.testing.assert_array_equal(y, np.arange(6))
    np.testing.assert_array_equal(x, 2 * np.arange(6))


def test_inplace_noncontiguous_copied_back(ops):
    op = _inplace(ops)
    base = np.arange(12, dtype=np.float32).reshape(3, 4)
    x = base[:, ::2]  # a strided view: staged for the call
    assert not x.flags.c_contiguous
    before = ops.staged_copies
    y = op(x)
    assert ops.staged_copies == before + 1
    np.testing.assert_array_equal(y, np.arange(12, dtype=np.float32).reshape(3, 4)[:, ::2])
    want = np.arange(12, dtype=np.float32).reshape(3, 4)
    want[:, ::2] *= 2
    np.testing.assert_array_equal(base, want)


def test_inplace_foreign_byte_order_copied_back(ops):
    op = _inplace(ops)
    x = np.arange(4, dtype=">f8")
    op(x)
    np.testing.assert_array_equal(x, 2 * np.arange(4))


def test_inplace_readonly_refused(ops):
    op = _inplace(ops)
    x = np.arange(4, dtype=np.float64)
    x.flags.writeable = False
    with pytest.raises(mxop.InvalidArgument) as ei:
        op(x)
    assert "read-only" in str(ei.value) and "double_inplace" in str(ei.value)
    np.testing.assert_array_equal(x, np.arange(4))


def test_inplace_non_array_refused(ops):
    op = _inplace(ops)
    with pytest.raises(mxop.InvalidArgument) as ei:
        op([1.0, 2.0])
    assert "in place" in str(ei.value)


# ---- strides ---------------------------------------------------------------------


def _strided(client):
    client.load("opkit_strided.so")
    return client.op("strided_scale"), client.op("dense_scale"), client.op("strides_seen")


def test_strided_view_to_strided_op_goes_without_copy(ops):
    sop, _, seen = _strided(ops)
    assert sop.strided and not ops.op("relu").strided
    base = ops.empty((4, 6), np.float64)
    base[...] = np.arange(24).reshape(4, 6)
    x = base[:, 1::2]
    copies, st = ops.staged_copies, staged(ops)
    y = sop(x)
    np.testing.assert_array_equal(y, 2 * np.arange(24).reshape(4, 6)[:, 1::2])
    assert ops.staged_copies == copies and staged(ops) == st
    np.testing.assert_array_equal(seen(x), [4, 3, 6, 2])


def test_strided_view_to_dense_op_is_made_contiguous(ops):
    _, dop, _ = _strided(ops)
    base = ops.empty((4, 6), np.float64)
    base[...] = np.arange(24).reshape(4, 6)
    copies = ops.staged_copies
    y = dop(base[:, ::3])
    np.testing.assert_array_equal(y, 2 * np.arange(24).reshape(4, 6)[:, ::3])
    assert ops.staged_copies == copies + 1


def test_strided_heap_array_to_strided_op_is_staged(ops):
    sop, _, _ = _strided(ops)
    x = np.arange(20, dtype=np.float64).reshape(4, 5).T  # not in shared memory
    copies = ops.staged_copies
    np.testing.assert_array_equal(sop(x), 2 * x)
    assert ops.staged_copies == copies + 1


# ---- host routines for every dtype ----------------------------------------------

_HOST_DTYPES = [np.float32, np.float64, np.float16, np.int32, np.int64, np.uint8, np.int8,
                np.bool_]


def _host(client):
    client.load("opkit_host.so")
    return client.op("host_apply")


def _operands(dt):
    if dt == np.bool_:
        return (np.array([True, False, True, False]), np.array([True, True, False, False]))
    a = np.array([1, 2, 3, 100], dtype=dt)
    b = np.array([4, 5, 6, 100], dtype=dt)
    if np.dtype(dt).kind == "f":
        a = (a / 4).astype(dt)
    return a, b


@pytest.mark.parametrize("dt", _HOST_DTYPES)
def test_host_routines_every_dtype(ops, dt):
    op = _host(ops)
    a, b = _operands(dt)
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(op(a, b, fn="add"), a + b)
        np.testing.assert_array_equal(op(a, b, fn="mul"), a * b)
    np.testing.assert_array_equal(op(a, b, fn="copy"), a)
    np.testing.assert_array_equal(op(a, b, fn="fill", value=3), np.full(4, 3).astype(dt))
    assert op(a, b, fn="sum")[0] == a.astype(np.float64).sum()
    if dt != np.bool_:
        want = b.astype(np.float64) + 2 * a.astype(np.float64)
        if np.dtype(dt).kind in "iu":
            info = np.iinfo(dt)
            want = np.clip(np.rint(want), info.min, info.max)
        np.testing.assert_array_equal(op(a, b, fn="axpy", alpha=2), want.astype(dt))
    else:
        with pytest.raises(mxop.DtypeMismatch):
            op(a, b, fn="axpy", alpha=2)


@pytest.mark.parametrize("dt", _HOST_DTYPES)
def test_host_convert_from_f64(ops, dt):
    op = _host(ops)
    x = np.array([-1.4, 0.4, 2.6, 300.0, -300.0, 0.0])
    got = op(x, x, fn="convert", to=mxop.client.dtype_code(dt))
    assert got.dtype == dt
    if np.dtype(dt).kind in "iu":
        info = np.iinfo(dt)
        want = np.clip(np.rint(x), info.min, info.max).astype(dt)
    else:
        want = x.astype(dt)
    np.testing.assert_array_equal(got, want)


def test_host_f16_gemm_accumulates_in_f32(ops):
    op = _host(ops)
    rng = np.random.default_rng(3)
    a = rng.standard_normal((5, 64)).astype(np.float16)
    b = rng.standard_normal((64, 3)).astype(np.float16)
    want = (a.astype(np.float32) @ b.astype(np.float32)).astype(np.float16)
    got = op(a, b, fn="gemm")
    assert got.dtype == np.float16
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=2e-3,
                               atol=2e-3)


def test_host_f16_rounding_matches_numpy(ops):
    op = _host(ops)
    x = np.array([1.0, 65504.0, 65520.0, 1e-7, 3e-8, 2.0**-24 * 1.5, -0.1, 1 / 3, np.inf],
                 np.float64)
    got = op(x, x, fn="convert", to=2)
    with np.errstate(over="ignore"):
        want = x.astype(np.float16)
    np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16))


# ---- the C++ example op -----------------------------------------------------------


def test_cpp_leaky_relu(ops):
    ops.load("leaky_relu.so")
    op = ops.op("leaky_relu")
    assert [(a.name, a.default) for a in op.attrs] == [("alpha", 0.01)]
    x = np.linspace(-2, 2, 9)
    y = op(x, alpha=0.25)
    np.testing.assert_allclose(y, np.where(x > 0, x, 0.25 * x))
    dy = np.ones_like(x)
    dx = op.backward([dy], [x], [y], alpha=0.25)
    np.testing.assert_allclose(dx, np.where(x > 0, 1.0, 0.25))
    with pytest.raises(mxop.InvalidAttribute):
        ops.op("clamp")(x, lo=1.0, hi=0.0)


# ---- outputs of data-dependent shape ----------------------------------------------


def test_dynamic_output_forward_and_backward(ops):
    ops.load("masked_select.so")
    op = ops.op("masked_select")
    assert op.dynamic_outputs == 1
    x = np.arange(12, dtype=np.float64).reshape(3, 4)
    mask = (x % 3 == 0)
    copies = ops.staged_copies
    y = op(x, mask)
    assert y.shape == (4,)
    np.testing.assert_array_equal(y, x[mask])
    assert ops.owns(y), "the output lies in shared memory"
    assert ops.staged_copies == copies
    dy = np.arange(4, dtype=np.float64) + 1
    dx, dmask = op.backward([dy], [x, mask.astype(np.uint8)], [y], needs=[True, False])
    want = np.zeros_like(x)
    want[mask] = dy
    np.testing.assert_array_equal(dx, want)
    assert dmask is None
    empty = op(x, np.zeros_like(mask))
    assert empty.shape == (0,)


def test_dynamic_output_into_given_out(ops):
    ops.load("masked_select.so")
    op = ops.op("masked_select")
    x = np.array([1.0, 2.0, 3.0, 4.0])
    out = ops.empty((4,), np.float64)
    y = op(x, np.array([True, False, True, False]), out=out)
    assert y.shape == (2,)
    np.testing.assert_array_equal(y, [1.0, 3.0])
