"""mxop ops as torch.ops.mxop.<op>: dispatcher kernels (CPU, Autograd,
Meta), jit.trace, jit.script, fx.symbolic_trace."""
import torch
import torch.fx

import mxop
import mxop.torch as mt
from mxop import _torch_library as tl

import pytest


@pytest.fixture
def T(ops):
    class NS:
        pass
    ns = NS()
    for name in ("relu", "gemm", "softmax", "sum_n"):
        setattr(ns, name, mt.op(name, ops))
    ns.client = ops
    return ns


def test_ops_are_registered_with_the_dispatcher(T):
    for name in ("relu", "gemm", "softmax", "sum_n"):
        assert tl.registered(name)
    x = torch.tensor([-1.0, 2.0])
    torch.testing.assert_close(torch.ops.mxop.relu(x), torch.relu(x))
    a, b, c = torch.randn(3), torch.randn(3), torch.randn(3)
    torch.testing.assert_close(torch.ops.mxop.sum_n([a, b, c]), a + b + c)


def test_dispatcher_autograd_kernel_runs_the_backward(T):
    A = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    B = torch.randn(2, 4, dtype=torch.float64, requires_grad=True)
    y = torch.ops.mxop.gemm(A, B, transpose_b=True)
    torch.testing.assert_close(y, A @ B.T)
    gA, gB = torch.autograd.grad(y.sum(), (A, B))
    rA, rB = torch.autograd.grad((A @ B.T).sum(), (A, B))
    torch.testing.assert_close(gA, rA)
    torch.testing.assert_close(gB, rB)
    assert torch.autograd.gradcheck(
        lambda a, b: torch.ops.mxop.gemm(a, b, transpose_b=True), (A, B))


def test_meta_kernel_infers_shapes(T):
    y = torch.ops.mxop.gemm(torch.empty(3, 4, device="meta"),
                            torch.empty(5, 4, device="meta"), transpose_b=True)
    assert y.is_meta and tuple(y.shape) == (3, 5) and y.dtype == torch.float32
    with pytest.raises(mxop.ShapeMismatch):
        torch.ops.mxop.gemm(torch.empty(3, 4, device="meta"), torch.empty(5, 4, device="meta"))


def test_jit_trace_records_the_op(T):
    def f(x):
        return T.relu(x) * 2

    tr = torch.jit.trace(f, torch.randn(5))
    assert "mxop::relu" in str(tr.graph)
    for x in (torch.tensor([1.0, -1.0, 2.0, -2.0, 3.0]),
              torch.tensor([-1.0, 1.0, -2.0, 2.0, -3.0])):
        torch.testing.assert_close(tr(x), torch.relu(x) * 2)


class ScriptNet(torch.nn.Module):
    def forward(self, a, b):
        return torch.ops.mxop.gemm(a, b, transpose_b=True) + 1


def test_jit_script_calls_torch_ops_mxop_gemm(T):
    s = torch.jit.script(ScriptNet())
    a, b = torch.randn(3, 4), torch.randn(2, 4)
    torch.testing.assert_close(s(a, b), a @ b.T + 1)


class FxNet(torch.nn.Module):
    def __init__(self, gemm, relu):
        super().__init__()
        self.fc = mt.Linear(4, 3, gemm)
        self.act = mt.OpModule(relu)

    def forward(self, x):
        return self.act(self.fc(x))


def test_fx_symbolic_trace(T):
    m = FxNet(T.gemm, T.relu)
    g = torch.fx.symbolic_trace(m)
    assert "torch.ops.mxop.gemm" in g.code and "torch.ops.mxop.relu" in g.code
    x = torch.randn(6, 4)
    torch.testing.assert_close(g(x), m(x))


def test_schema_from_declared_attributes():
    # Declared attributes come from the op-author work; a small fake
    # declaration shows the schema they give (typed, optional keywords).
    decl = [("alpha", "float", "1", False, ""), ("transpose_b", "bool", "0", False, ""),
            ("mode", "str", "", False, "")]
    s = tl._schema("gemm2", 2, 1, decl)
    assert s == ("gemm2(Tensor x0, Tensor x1, *, float? alpha=None, bool? transpose_b=None, "
                 "str? mode=None, float? timeout=None, int? seed=None) -> Tensor")
    assert tl._schema("g", 2, 1, None, mutated=2).startswith(
        "g(Tensor x0, Tensor(b!) x1, *, str? attrs=None")
    assert tl._schema("f", -1, 2, None) == (
        "f(Tensor[] inputs, *, str? attrs=None, float? timeout=None, int? seed=None) "
        "-> (Tensor, Tensor)")


def test_traced_module_differentiates_and_saves(T):
    import io

    m = torch.nn.Sequential(mt.Linear(4, 3, T.gemm), torch.nn.ReLU())
    tr = torch.jit.trace(m, torch.randn(2, 4))
    x = torch.randn(5, 4, requires_grad=True)
    y = tr(x)
    y.sum().backward()
    x2 = x.detach().requires_grad_()
    m(x2).sum().backward()
    torch.testing.assert_close(x.grad, x2.grad)
    torch.testing.assert_close(y, m(x2))
    buf = io.BytesIO()
    torch.jit.save(tr, buf)
    buf.seek(0)
    torch.testing.assert_close(torch.jit.load(buf)(x), y)
