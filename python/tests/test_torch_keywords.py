"""Keywords of a TorchOp call: timeout=, out=, seed= do what the docs say;
against declared attributes, unknown keywords raise InvalidAttribute."""
import time

import pytest
import torch

import mxop
import mxop.torch as mt


@pytest.fixture
def T(ops):
    class NS:
        pass
    ns = NS()
    for name in ("relu", "gemm", "softmax", "sleep", "identity"):
        setattr(ns, name, mt.op(name, ops))
    ns.client = ops
    return ns


def test_timeout_keyword_is_the_call_deadline(T):
    x = torch.ones(4)
    t0 = time.monotonic()
    with pytest.raises(mxop.Timeout):
        T.sleep(x, ms=20000, timeout=0.5)
    # Generous bound for a loaded machine: far below the 20 s the op sleeps.
    assert time.monotonic() - t0 < 15
    # The session works afterwards (the worker was replaced).
    torch.testing.assert_close(T.relu(torch.tensor([-1.0, 3.0])), torch.tensor([0.0, 3.0]))
    # A deadline long enough lets the op finish.
    torch.testing.assert_close(T.sleep(x, ms=10, timeout=20), x)


def test_timeout_must_be_positive(T):
    with pytest.raises(mxop.InvalidArgument, match="timeout"):
        T.relu(torch.ones(2), timeout=0)


def test_out_keyword_writes_into_the_tensor(T):
    x = torch.tensor([-1.0, 2.0, -3.0, 4.0])
    buf = torch.full((4,), 7.0)
    v = buf._version
    r = T.relu(x, out=buf)
    assert r is buf
    torch.testing.assert_close(buf, torch.relu(x))
    assert buf._version > v  # torch sees the write
    A, B = torch.randn(3, 4), torch.randn(4, 2)
    C = torch.empty(3, 2)
    T.gemm(A, B, out=C)
    torch.testing.assert_close(C, A @ B)


def test_out_keyword_refuses_wrong_shape_dtype_and_autograd(T):
    x = torch.randn(4)
    with pytest.raises(mxop.ShapeMismatch, match="relu.*out\\[0\\]"):
        T.relu(x, out=torch.empty(5))
    with pytest.raises(mxop.DtypeMismatch, match="relu.*out\\[0\\]"):
        T.relu(x, out=torch.empty(4, dtype=torch.float64))
    with pytest.raises(mxop.ArityMismatch):
        T.relu(x, out=(torch.empty(4), torch.empty(4)))
    with pytest.raises(mxop.NotSupported, match="autograd"):
        T.relu(x.requires_grad_(), out=torch.empty(4))
    with torch.no_grad():
        buf = torch.empty(4)
        T.relu(x, out=buf)
    torch.testing.assert_close(buf, torch.relu(x.detach()))


def test_seed_keyword_sets_the_call_seed(T):
    # No op of this tree draws random numbers, so what is checked is that
    # the seed reaches the call record libmxop sends (mxop_call_t.seed).
    ent = T.relu._entry({}, None, 12345)
    assert ent.call.seed == 12345
    torch.testing.assert_close(T.relu(torch.tensor([-1.0, 1.0]), seed=12345),
                               torch.tensor([0.0, 1.0]))
    for bad in (0, -1, 1.5, "7", 2**64):
        with pytest.raises(mxop.InvalidArgument, match="seed"):
            T.relu(torch.ones(2), seed=bad)


def test_reserved_keywords_are_not_default_attributes(T):
    with pytest.raises(mxop.InvalidArgument, match="timeout= is a keyword of a call"):
        T.relu.bind(timeout=1)


def _declare(monkeypatch, op, decl):
    # Declared attributes come from the op-author work (Op.attrs); here a
    # small fake declaration stands in for it.
    monkeypatch.setattr(op, "attrs", decl, raising=False)


def test_unknown_keywords_against_declared_ops_raise(T, monkeypatch):
    _declare(monkeypatch, T.softmax.op, [("axis", "int", "-1", False, "the axis")])
    x = torch.randn(3, 4)
    with pytest.raises(mxop.InvalidAttribute, match="'softmax' has no attribute 'dim'.*axis"):
        T.softmax(x, dim=0)
    with pytest.raises(mxop.InvalidAttribute, match="'softmax' has no attribute 'inplace'"):
        T.softmax(x, inplace=True)
    with pytest.raises(mxop.InvalidAttribute, match="inplace"):
        mt.TorchOp(T.softmax.op, inplace=True)
    torch.testing.assert_close(T.softmax(x, axis=1), torch.softmax(x, 1))


def test_undeclared_ops_pass_keywords_through(T):
    # Without declarations keywords go to the op as attribute strings (the
    # op itself checks them): softmax takes axis=1 and refuses axis=0.
    x = torch.randn(3, 4)
    with pytest.raises(mxop.InvalidAttribute, match="axis"):
        T.softmax(x, axis=0)
    torch.testing.assert_close(T.softmax(x, axis=1), torch.softmax(x, 1))
