"""mxop ops as torch 2 custom ops: torch.compile (fullgraph, dynamic shapes,
backward), torch.library.opcheck on every shipped op and the fixtures' ops,
torch.export."""
import pytest
import torch

import mxop.torch as mt
from mxop import _torch_library as tl

pytestmark = pytest.mark.skipif(not tl.TORCH2, reason="torch 2.4 or later")


@pytest.fixture
def T(ops):
    for lib in ("masked_select.so", "leaky_relu.so", "opkit_inplace.so", "flaw_none.so",
                "opkit_strided.so"):
        ops.load(lib)

    class NS:
        pass
    ns = NS()
    for name in ("relu", "gemm", "softmax", "sum_n", "masked_select", "leaky_relu", "clamp",
                 "identity", "double_inplace", "flaw_none", "strided_scale", "dense_scale"):
        setattr(ns, name, mt.op(name, ops))
    ns.client = ops
    return ns


class Counting:
    """A torch.compile backend (aot_eager: AOTAutograd without inductor,
    quick to compile) that counts the graphs it is given."""

    def __init__(self):
        self.graphs = 0

    def __call__(self, gm, example_inputs):
        self.graphs += 1
        return torch._dynamo.lookup_backend("aot_eager")(gm, example_inputs)


class Model(torch.nn.Module):
    def __init__(self, T):
        super().__init__()
        self.fc = mt.Linear(4, 8, T.gemm)
        self.act = mt.OpModule(T.leaky_relu, alpha=0.1)
        self.w = torch.nn.Parameter(torch.randn(3, 8))

    def forward(self, x):
        h = torch.ops.mxop.relu(self.act(self.fc(x)))
        y = torch.ops.mxop.gemm(h, self.w, transpose_b=True)
        return torch.ops.mxop.softmax(torch.ops.mxop.sum_n([y, y * 2.0]), axis=1)


def _grads(model, x):
    model.zero_grad()
    x = x.detach().requires_grad_()
    out = model(x)
    (out * torch.arange(out.shape[1], dtype=out.dtype)).sum().backward()
    return out.detach(), [x.grad] + [p.grad.clone() for p in model.parameters()]


def test_compile_fullgraph_equals_eager_with_backward(T):
    torch._dynamo.reset()
    model = Model(T)
    x = torch.randn(5, 4)
    want, want_g = _grads(model, x)
    be = Counting()
    compiled = torch.compile(model, fullgraph=True, backend=be)
    got, got_g = _grads(compiled, x)
    torch.testing.assert_close(got, want)
    for a, b in zip(got_g, want_g):
        torch.testing.assert_close(a, b)
    assert be.graphs == 1


def test_compile_with_inductor(T):
    torch._dynamo.reset()

    def f(a, b):
        return torch.ops.mxop.relu(T.gemm(a, b, transpose_b=True) + 1.0).sum(1)

    a, b = torch.randn(3, 4, requires_grad=True), torch.randn(6, 4)
    cf = torch.compile(f, fullgraph=True)
    torch.testing.assert_close(cf(a, b), f(a, b))
    ga, = torch.autograd.grad(cf(a, b).sum(), a)
    wa, = torch.autograd.grad(f(a, b).sum(), a)
    torch.testing.assert_close(ga, wa)


def test_compile_dynamic_shapes_one_graph(T):
    torch._dynamo.reset()
    model = Model(T)
    be = Counting()
    compiled = torch.compile(model, fullgraph=True, dynamic=True, backend=be)
    first = None
    for n in (2, 5, 9):
        x = torch.randn(n, 4)
        want, want_g = _grads(model, x)
        got, got_g = _grads(compiled, x)
        torch.testing.assert_close(got, want)
        for a, b in zip(got_g, want_g):
            torch.testing.assert_close(a, b)
        first = first or be.graphs
    assert be.graphs == first  # new batch sizes: no recompilation


def test_compile_data_dependent_output(T):
    torch._dynamo.reset()

    def f(x, m):
        return torch.ops.mxop.relu(torch.ops.mxop.masked_select(x, m)) * 2.0

    be = Counting()
    cf = torch.compile(f, fullgraph=True, backend=be)
    with torch._dynamo.config.patch(capture_dynamic_output_shape_ops=True):
        _data_dependent(cf)
    assert be.graphs >= 1


def _data_dependent(cf):
    for n in (6, 6, 11):
        x = torch.randn(n, requires_grad=True)
        m = torch.rand(n) > 0.5
        got = cf(x, m)
        torch.testing.assert_close(got, torch.relu(torch.masked_select(x, m)) * 2.0)
        g, = torch.autograd.grad(got.sum(), x)
        torch.testing.assert_close(g, ((x > 0) & m).float() * 2.0)


def test_fake_shapes_follow_symbolic_sizes(T):
    from mxop import _torch_fake
    from mxop.torch import dtype_code, TORCH_OF
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    op = T.gemm.op
    with FakeTensorMode(shape_env=ShapeEnv()) as mode:
        a = mode.from_tensor(torch.randn(3, 4), static_shapes=False)
        b = mode.from_tensor(torch.randn(5, 4), static_shapes=False)
        dts, shapes = _torch_fake.output_shapes(op, T.gemm._entry({"transpose_b": True}),
                                                (a, b), dtype_code, TORCH_OF)
    assert dts == [torch.float32]
    # gemm(a, b^T): [a rows, b rows]; the shared inner size is specialised.
    assert str(shapes[0][0]) == str(a.shape[0]) and str(shapes[0][1]) == str(b.shape[0])


# Every shipped op (plugins/) and the fixtures' ops, with what they take.
def _cases(T):
    f = lambda *s: torch.randn(*s, requires_grad=True)  # noqa: E731
    d = lambda *s: torch.randn(*s, dtype=torch.float64, requires_grad=True)  # noqa: E731
    return [
        ("relu", (f(4, 3),), {}),
        ("relu", (d(7),), {}),
        ("gemm", (f(3, 4), f(5, 4)), {"transpose_b": True, "alpha": 2.0}),
        ("gemm", (f(4, 3), f(4, 2)), {"transpose_a": True}),
        ("softmax", (f(3, 6),), {"axis": -1}),
        ("sum_n", ([f(2, 3), f(2, 3), f(2, 3)],), {}),
        ("masked_select", (f(8), torch.rand(8) > 0.3), {}),
        ("leaky_relu", (f(5),), {"alpha": 0.2}),
        ("clamp", (torch.randn(6),), {"lo": -0.5, "hi": 0.5}),  # no backward
        ("identity", (f(2, 2),), {}),                             # crash.so's fixture op
        ("double_inplace", (torch.randn(5),), {}),                # writes its input
        ("flaw_none", (d(3, 2),), {}),                            # mxop verify's correct op
        ("strided_scale", (torch.randn(4, 6, dtype=torch.float64)[:, ::2],), {}),  # strided
        ("dense_scale", (torch.randn(3, 3, dtype=torch.float64),), {}),
        # (attrs_echo of opkit_attrs.so is left out: its output counts the
        # calls of its worker, so no two runs agree, as opcheck requires.)
    ]


def test_opcheck_every_shipped_and_fixture_op(T):
    for name, args, kw in _cases(T):
        res = torch.library.opcheck(getattr(torch.ops.mxop, name).default, args, kw)
        assert set(res.values()) == {"SUCCESS"}, (name, res)


def test_output_size_mxop_cannot_express_is_refused_by_name(ops):
    # flaw_infer's output has one more row than its input: n + 1, which the
    # fake kernel refuses to guess under symbolic sizes.
    ops.load("flaw_infer.so")
    assert mt.op("flaw_infer", ops).registered
    with pytest.raises(Exception, match="flaw_infer.*cannot express"):
        torch.library.opcheck(torch.ops.mxop.flaw_infer.default,
                              (torch.randn(4, requires_grad=True),), {})


def test_export_runs_the_ops(T):
    model = Model(T)
    x = torch.randn(5, 4)
    batch = torch.export.Dim("batch", min=2, max=64)
    ep = torch.export.export(model, (x,), dynamic_shapes={"x": {0: batch}})
    names = {str(n.target) for n in ep.graph.nodes if n.op == "call_function"}
    assert {"mxop.relu.default", "mxop.gemm.default", "mxop.softmax.default"} <= names, names
    for n in (5, 17):
        x = torch.randn(n, 4)
        torch.testing.assert_close(ep.module()(x), model(x))


LOADER = r"""
import sys, torch
import mxop, mxop.torch as mt
scripted, exported, load_first = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
if load_first:  # what python/README.md says to do before loading a saved model
    c = mxop.connect(sys.argv[4])
    mt.load(c, "gemm.so"); mt.load(c, "relu.so")
x = torch.ones(3, 4)
try:
    m = torch.jit.load(scripted)
    print("jit", m(x).sum().item())
    ep = torch.export.load(exported)
    print("export", ep.module()(x).sum().item())
except Exception as e:
    print("error", " ".join(str(e).split())[:400])
"""


def test_saved_models_load_after_the_libraries(T, daemon, tmp_path):
    import os
    import subprocess

    from conftest import PYTHON, SOURCE, BUILD

    w = torch.ones(2, 4)

    class M(torch.nn.Module):
        def forward(self, x):
            return torch.ops.mxop.relu(torch.ops.mxop.gemm(x, w, transpose_b=True))

    m = M()
    x = torch.ones(3, 4)
    torch.jit.save(torch.jit.trace(m, x), str(tmp_path / "m.pt"))
    torch.export.save(torch.export.export(m, (x,)), str(tmp_path / "m.pt2"))
    env = {k: v for k, v in os.environ.items()
           if k not in ("MXOP_SOCKET", "MXOP_PLUGIN_DIR", "MXOP_EMBEDDED_SOCKET")}
    env.update(PYTHONPATH=os.path.join(SOURCE, "python"), MXOP_BUILD_DIR=BUILD,
               TMPDIR=str(tmp_path))
    out = {}
    for first in ("1", "0"):
        p = subprocess.run([PYTHON, "-c", LOADER, str(tmp_path / "m.pt"),
                            str(tmp_path / "m.pt2"), first, daemon.socket],
                           env=env, capture_output=True, text=True, timeout=180)
        assert p.returncode == 0, p.stderr
        out[first] = p.stdout.split("\n")
    assert out["1"][:2] == ["jit 24.0", "export 24.0"], out
    assert out["0"][0].startswith("error") and "mxop" in out["0"][0], out
