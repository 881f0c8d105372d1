"""Every error class the engine can provoke, raised with the library's detail."""
import time

import numpy as np
import pytest

import mxop

X = np.zeros(4, np.float32)


def check(ei, cls, code, *words):
    e = ei.value
    assert type(e) is cls
    assert e.code == code and e.name == mxop.err_name(code)
    for w in words:
        assert w in e.message, (w, e.message)


@pytest.mark.parametrize("name,words", [
    ("segv", ("segv", "SIGSEGV")),
    ("abort", ("abort", "SIGABRT")),
    ("exit3", ("exit3", "3")),
])
def test_worker_crashed_and_the_next_call_works(ops, name, words):
    pid = ops.stats().worker_pid
    with pytest.raises(mxop.WorkerCrashed) as ei:
        ops.op(name)(X)
    check(ei, mxop.WorkerCrashed, -1025, *words)
    np.testing.assert_array_equal(ops.op("identity")(X + 1), 1)
    st = ops.stats()
    assert st.worker_pid != pid and st.worker_restarts >= 1


def test_timeout_kills_a_hanging_op(ops):
    t0 = time.monotonic()
    with pytest.raises(mxop.Timeout) as ei:
        ops.op("hang")(X, timeout=0.3)
    assert time.monotonic() - t0 < 8
    check(ei, mxop.Timeout, -1026, "hang")
    assert isinstance(ei.value, TimeoutError)
    np.testing.assert_array_equal(ops.op("identity")(X), 0)


def test_client_default_timeout(ops):
    ops.set_timeout(0.2)
    try:
        with pytest.raises(mxop.Timeout):
            ops.op("sleep")(X, ms=3000)
    finally:
        ops.set_timeout(20)
    ops.op("sleep")(X, ms=1)


def test_input_written(ops):
    with pytest.raises(mxop.InputWritten) as ei:
        ops.op("write_input")(ops.zeros(4))
    check(ei, mxop.InputWritten, -1031, "write_input")


def test_invalid_attribute(ops):
    gemm = ops.op("gemm")
    a = np.ones((2, 2), np.float32)
    with pytest.raises(mxop.InvalidAttribute) as ei:
        gemm(a, a, transposeA=1)
    check(ei, mxop.InvalidAttribute, -1018, "transposeA")
    with pytest.raises(mxop.InvalidAttribute) as ei:
        gemm(a, a, alpha="x")
    check(ei, mxop.InvalidAttribute, -1018, "alpha")


def test_shape_mismatch(ops):
    with pytest.raises(mxop.ShapeMismatch) as ei:
        ops.op("gemm")(np.ones((2, 3)), np.ones((4, 5)))
    check(ei, mxop.ShapeMismatch, -1016, "inner")


def test_dtype_mismatch(ops):
    with pytest.raises(mxop.DtypeMismatch) as ei:
        ops.op("relu")(np.ones(3, np.int32))
    check(ei, mxop.DtypeMismatch, -1017, "i32")


def test_unknown_op(ops):
    with pytest.raises(mxop.UnknownOp) as ei:
        ops.op("no_such_op")
    check(ei, mxop.UnknownOp, -1014, "no_such_op")


def test_library_not_found_and_outside(client):
    with pytest.raises(mxop.LibraryNotFound) as ei:
        client.load("missing.so")
    check(ei, mxop.LibraryNotFound, -1009, "missing.so")
    with pytest.raises(mxop.LibraryOutside) as ei:
        client.load("../../../../lib/x86_64-linux-gnu/libm.so.6")
    assert ei.value.code == -1010


def test_library_invalid_abi_and_init(client):
    with pytest.raises(mxop.AbiMismatch):
        client.load("bad_abi.so")
    with pytest.raises(mxop.LibraryInitFailed):
        client.load("init_fail.so")
    with pytest.raises(mxop.LibraryInvalid):
        client.load("no_init.so")


def test_op_failed_keeps_the_message(ops):
    with pytest.raises(mxop.OpFailed) as ei:
        ops.op("fail")(X)
    check(ei, mxop.OpFailed, -1024, "asked to fail")


def test_arity(ops):
    with pytest.raises(mxop.ArityMismatch):
        ops.op("relu")(X, X)


def test_not_supported(ops):
    with pytest.raises(mxop.NotSupported):
        ops.op("segv").backward([X], [X], [X])
    with pytest.raises(mxop.NotSupported):
        ops.op("relu").create_state(X)


def test_invalid_argument(ops):
    with pytest.raises(mxop.InvalidArgument):
        ops.op("relu")(np.zeros((1,) * 9))
    with pytest.raises(mxop.InvalidArgument):
        ops.op("relu")(np.zeros(3, np.complex64))
    with pytest.raises(mxop.InvalidArgument):
        ops.empty((2,), "nope")


def test_disconnected(tmp_path):
    with pytest.raises(mxop.Disconnected) as ei:
        mxop.connect(str(tmp_path / "nobody.sock"))
    assert "nobody.sock" in ei.value.message


def test_errors_are_counted(ops):
    before = ops.stats().errors
    with pytest.raises(mxop.OpFailed):
        ops.op("fail")(X)
    assert ops.stats().errors == before + 1
