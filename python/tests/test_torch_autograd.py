"""Autograd through mxop ops is never silently wrong: double backward,
autograd.grad, inputs written in place, stateful backward, errors."""
import copy

import pytest
import torch

import mxop
import mxop.torch as mt


@pytest.fixture
def T(ops):
    class NS:
        pass
    ns = NS()
    for name in ("relu", "gemm", "softmax", "running_mean_norm", "identity", "segv"):
        setattr(ns, name, mt.op(name, ops))
    ns.client = ops
    return ns


def test_gradient_penalty_through_softmax_raises_clearly(T):
    # Double backward: torch gives a real second derivative; an mxop op must
    # not give a silently wrong one (the issue saw [0.0006, 0.0277, 0.2146]).
    x = torch.tensor([0.1, 0.5, 2.0], requires_grad=True)
    w = torch.tensor([1.0, 2.0, 3.0])
    y = T.softmax(x)
    g, = torch.autograd.grad((y * w).sum(), x, create_graph=True)
    loss = (y * w).sum() + (g ** 2).sum()
    with pytest.raises(RuntimeError, match="softmax.*once-differentiable"):
        loss.backward()


def test_gradgradcheck_gives_the_clear_error(T):
    x = torch.randn(2, 3, dtype=torch.float64, requires_grad=True)
    with pytest.raises(RuntimeError, match="once-differentiable"):
        torch.autograd.gradgradcheck(T.softmax, (x,))


def test_first_order_gradcheck_still_passes(T):
    x = torch.randn(2, 3, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(T.softmax, (x,))


def test_autograd_grad_on_gemm_matches_torch(T):
    A = torch.randn(3, 4, requires_grad=True)
    B = torch.randn(4, 2, requires_grad=True)
    gA, gB = torch.autograd.grad((T.gemm(A, B) ** 2).sum(), (A, B))
    rA, rB = torch.autograd.grad(((A @ B) ** 2).sum(), (A, B))
    torch.testing.assert_close(gA, rA)
    torch.testing.assert_close(gB, rB)
    # Only one of them.
    gA2, = torch.autograd.grad(T.gemm(A, B.detach()).sum(), A)
    torch.testing.assert_close(gA2, torch.ones(3, 2) @ B.detach().T)


def _mutating(op):
    """A fake declaration: the identity op, declared to write input 0 in
    place (no library of this tree declares mutated inputs)."""
    m = copy.copy(op)
    m.mutated_inputs = 1
    return mt.TorchOp(m, _register=False)  # torch.ops.mxop.identity stays the real op


def test_mutated_input_of_a_leaf_is_refused_like_torch(T):
    t = _mutating(T.identity.op)
    a = torch.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        t(a)


def test_mutated_input_is_marked_dirty_and_backward_sees_old_values(T):
    t = _mutating(T.identity.op)
    a = torch.tensor([1.0, 2.0], requires_grad=True)
    x = a * 2
    v = x._version
    y = t(x)
    assert x._version > v, "the input written in place was not marked dirty"
    assert x.grad_fn is not None and "_Fn" in type(x.grad_fn).__name__
    y.sum().backward()
    torch.testing.assert_close(a.grad, torch.tensor([2.0, 2.0]))
    # A gradient through the input's new value is refused, not dropped.
    a.grad = None
    x2 = a * 2
    t(x2)
    with pytest.raises(mxop.NotSupported, match="in place"):
        x2.sum().backward()


def test_stateful_backward_belongs_to_its_own_forward(T):
    st = T.running_mean_norm.create_state(torch.zeros(4, 3, dtype=torch.float64), momentum=1)
    x1 = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
    x2 = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
    y1 = st(x1)
    y2 = st(x2)
    with pytest.raises(mxop.InvalidArgument, match="running_mean_norm.*later call"):
        y1.sum().backward()
    y2.sum().backward()
    assert (x2.grad == 1).all()
    st.close()


def test_exceptions_are_runtime_errors(T):
    for cls in mxop.errors.CLASSES.values():
        assert issubclass(cls, RuntimeError) and issubclass(cls, mxop.MxopError)
    x = torch.randn(4, requires_grad=True)
    try:
        T.segv(x)
    except RuntimeError as e:  # torch-style handling catches it
        assert isinstance(e, mxop.WorkerCrashed)
    else:
        pytest.fail("segv returned")
    assert issubclass(mxop.Timeout, TimeoutError) and issubclass(mxop.InvalidArgument,
                                                                 ValueError)


def test_sparse_tensor_names_mxop(T):
    s = torch.eye(3).to_sparse()
    with pytest.raises(mxop.NotSupported, match="mxop.*sparse.*to_dense"):
        T.relu(s)
