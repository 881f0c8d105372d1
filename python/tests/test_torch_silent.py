"""Never silently wrong: each case here once gave a wrong result
or lost information with no error, through mxop.torch or torch.ops.mxop."""
import io

import pytest
import torch
import torch.autograd.forward_ad as fwAD

import mxop
import mxop.torch as mt


@pytest.fixture
def T(ops):
    ops.load("masked_select.so")
    ops.load("opkit_inplace.so")

    class NS:
        pass
    ns = NS()
    for name in ("relu", "gemm", "masked_select", "double_inplace"):
        setattr(ns, name, mt.op(name, ops))
    ns.client = ops
    return ns


X = torch.tensor([0.0, 1.0, 0.0, 2.0])


@pytest.mark.parametrize("via", ["TorchOp", "torch.ops", "torch.ops no grad"])
def test_data_dependent_output_has_its_real_shape(T, via):
    x = X.clone().requires_grad_(via != "torch.ops no grad")
    mask = X != 0
    if via == "TorchOp":
        y = T.masked_select(x, mask)
    else:
        y = torch.ops.mxop.masked_select(x, mask)
    assert y.shape == (2,)
    assert y.tolist() == [1.0, 2.0]
    if x.requires_grad:
        y.backward(torch.tensor([3.0, 4.0]))
        assert x.grad.tolist() == [0.0, 3.0, 0.0, 4.0]


def test_data_dependent_output_gradcheck(T):
    x = torch.randn(7, dtype=torch.float64, requires_grad=True)
    mask = torch.tensor([1, 0, 1, 1, 0, 0, 1], dtype=torch.bool)
    assert torch.autograd.gradcheck(lambda t: T.masked_select(t, mask), (x,))
    torch.testing.assert_close(T.masked_select(x, mask), torch.masked_select(x, mask))


@pytest.mark.parametrize("via", ["TorchOp", "torch.ops"])
def test_inplace_op_on_a_non_contiguous_tensor_keeps_its_write(T, via):
    y = torch.ones(10)
    view = y[::2]
    if via == "TorchOp":
        before = T.double_inplace(view)
    else:
        before = torch.ops.mxop.double_inplace(view)
    assert before.tolist() == [1.0] * 5
    assert y.tolist() == [2.0, 1.0] * 5


def test_forward_mode_ad_raises_naming_the_op(T):
    x = torch.randn(4)
    with fwAD.dual_level():
        dual = fwAD.make_dual(x, torch.ones(4))
        for f in (T.relu, torch.ops.mxop.relu):
            with pytest.raises(RuntimeError, match="relu.*forward-mode"):
                f(dual)


@pytest.mark.skipif(int(torch.__version__.split(".")[0]) < 2,
                    reason="torch 1.13's TorchScript drops the text of an error raised by "
                           "a Python kernel (torch 1.13 is no longer tested)")
def test_torchscript_shows_the_whole_mxop_message(T):
    a, b = torch.randn(3, 4), torch.randn(5, 6)

    @torch.jit.script
    def scripted(x, y):
        return torch.ops.mxop.gemm(x, y)

    traced = torch.jit.trace(lambda x, y: T.gemm(x, y), (torch.randn(3, 4), torch.randn(4, 2)))
    for f in (scripted, traced):
        with pytest.raises(Exception) as e:
            f(a, b)
        assert "gemm" in str(e.value) and "4" in str(e.value) and "5" in str(e.value), \
            str(e.value)
        assert "shape" in str(e.value).lower(), str(e.value)


def test_inference_mode_with_enable_grad_inside(T):
    w = torch.randn(5, requires_grad=True)  # a parameter, made outside
    with torch.inference_mode():
        t = w * 1
        with torch.enable_grad():
            for x in (w, t):
                for f in (T.relu, torch.ops.mxop.relu):
                    y = f(x)
                    # As torch.relu's: no graph, an inference tensor.
                    assert not y.requires_grad and torch.is_inference(y)
                    torch.testing.assert_close(y, torch.relu(x.detach()))


@pytest.mark.parametrize("dtype", [torch.complex64, torch.int16])
def test_dtype_error_names_the_op(T, dtype):
    x = torch.ones(3, dtype=dtype)
    for f in (T.relu, torch.ops.mxop.relu):
        with pytest.raises(RuntimeError, match="relu") as e:
            f(x)
        assert str(dtype).split(".")[1] in str(e.value), str(e.value)


@pytest.mark.parametrize("via", ["TorchOp", "torch.ops"])
def test_shipped_op_refuses_an_unknown_keyword(T, via):
    x = torch.randn(3)
    with pytest.raises(RuntimeError) as e:
        if via == "TorchOp":
            T.relu(x, inplace=True)
        else:
            torch.ops.mxop.relu(x, inplace=True)
    assert "relu" in str(e.value) and "inplace" in str(e.value), str(e.value)


def test_linear_scripts(T):
    lin = mt.Linear(3, 2, T.gemm)
    s = torch.jit.script(torch.nn.Sequential(lin, mt.OpModule(T.relu)))
    x = torch.randn(4, 3, requires_grad=True)
    want = torch.relu(x @ lin.weight.T + lin.bias)
    got = s(x)
    torch.testing.assert_close(got, want)
    got.sum().backward()  # into the same parameters
    assert lin.weight.grad is not None and x.grad is not None
    nob = mt.Linear(3, 2, T.gemm, bias=False)
    torch.testing.assert_close(torch.jit.script(nob)(x), x @ nob.weight.T)


def test_op_module_scripts(T):
    m = mt.OpModule(T.relu)
    s = torch.jit.script(m)
    x = torch.randn(6)
    torch.testing.assert_close(s(x), torch.relu(x))
    g = torch.jit.script(mt.OpModule(T.gemm, transpose_b=True))
    a, b = torch.randn(2, 3), torch.randn(4, 3)
    torch.testing.assert_close(g(a, b), a @ b.T)
    # Saved and loaded again (torch.ops.mxop.gemm is registered in this process).
    buf = io.BytesIO()
    torch.jit.save(g, buf)
    buf.seek(0)
    torch.testing.assert_close(torch.jit.load(buf)(a, b), a @ b.T)


@pytest.mark.parametrize("make, what", [
    (lambda: torch.randn(4).to_sparse(), "sparse"),
    (lambda: torch.quantize_per_tensor(torch.randn(4), 0.1, 0, torch.qint8), "quantiz"),
    (lambda: torch.ones((1,) * 9), "dimension"),
])
def test_bad_tensors_are_refused_naming_the_op(T, make, what):
    x = make()
    for f in (T.relu, torch.ops.mxop.relu):
        with pytest.raises(RuntimeError) as e:
            f(x)
        assert "relu" in str(e.value) and what in str(e.value).lower(), str(e.value)


def test_wrong_rank_and_wrong_keyword_name_the_op(T):
    a, b = torch.randn(2, 3, 4), torch.randn(4, 5)
    for f in (T.gemm, torch.ops.mxop.gemm):
        with pytest.raises(RuntimeError, match="gemm") as e:
            f(a, b)
        assert "2-d" in str(e.value) and "[2,3,4]" in str(e.value), str(e.value)
    for call in (lambda: T.gemm(b.T, b, transpose=True),
                 lambda: torch.ops.mxop.gemm(b.T, b, transpose=True)):
        with pytest.raises(Exception, match="gemm") as e:
            call()
        assert "transpose" in str(e.value), str(e.value)
