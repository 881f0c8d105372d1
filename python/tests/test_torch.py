"""The PyTorch layer: autograd through mxop ops, modules, zero-copy paths."""
import gc

import pytest
import torch

import mxop
import mxop.torch as mt

from conftest import staged

torch.manual_seed(0)


@pytest.fixture
def T(ops):
    """TorchOps of the client's loaded ops."""
    class NS:
        pass
    ns = NS()
    for name in ("relu", "gemm", "softmax", "sum_n", "running_mean_norm", "identity", "segv"):
        setattr(ns, name, mt.op(name, ops))
    ns.client = ops
    return ns


@pytest.mark.parametrize("ta", [False, True])
@pytest.mark.parametrize("tb", [False, True])
def test_gemm_forward_and_grads_match_torch(T, ta, tb):
    A = torch.randn((4, 3) if ta else (3, 4), dtype=torch.float32, requires_grad=True)
    B = torch.randn((5, 4) if tb else (4, 5), dtype=torch.float32, requires_grad=True)
    C = T.gemm(A, B, transpose_a=ta, transpose_b=tb)
    A2 = A.detach().clone().requires_grad_()
    B2 = B.detach().clone().requires_grad_()
    C2 = (A2.T if ta else A2) @ (B2.T if tb else B2)
    torch.testing.assert_close(C, C2)
    g = torch.randn_like(C2)
    C.backward(g)
    C2.backward(g)
    torch.testing.assert_close(A.grad, A2.grad)
    torch.testing.assert_close(B.grad, B2.grad)


@pytest.mark.parametrize("ta", [False, True])
@pytest.mark.parametrize("tb", [False, True])
def test_gemm_gradcheck_f64(T, ta, tb):
    A = torch.randn((4, 3) if ta else (3, 4), dtype=torch.float64, requires_grad=True)
    B = torch.randn((5, 4) if tb else (4, 5), dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(
        lambda a, b: T.gemm(a, b, transpose_a=ta, transpose_b=tb, alpha=1.5), (A, B))


def test_relu_and_softmax_match_torch(T):
    x = torch.randn(6, 9, requires_grad=True)
    x2 = x.detach().clone().requires_grad_()
    for mine, ref in ((T.relu, torch.relu), (T.softmax, lambda t: torch.softmax(t, -1))):
        x.grad = x2.grad = None
        y, y2 = mine(x), ref(x2)
        torch.testing.assert_close(y, y2)
        g = torch.randn_like(y2)
        y.backward(g)
        y2.backward(g)
        torch.testing.assert_close(x.grad, x2.grad)


def test_relu_softmax_gradcheck_f64(T):
    # Away from relu's kink, where finite differences are not defined.
    x = torch.randn(5, 7, dtype=torch.float64)
    x = (x + 0.1 * x.sign()).requires_grad_()
    assert torch.autograd.gradcheck(T.relu, (x,))
    assert torch.autograd.gradcheck(T.softmax, (x,))
    assert torch.autograd.gradcheck(lambda t: T.softmax(t, axis=-1), (x,))


def test_variadic_and_partial_grads(T):
    a = torch.randn(3, requires_grad=True)
    b = torch.randn(3)  # needs no gradient
    c = torch.randn(3, requires_grad=True)
    y = T.sum_n(a, b, c)
    torch.testing.assert_close(y, a + b + c)
    y.sum().backward()
    assert (a.grad == 1).all() and (c.grad == 1).all() and b.grad is None


def test_no_grad_path_skips_autograd(T):
    x = torch.randn(4, requires_grad=True)
    with torch.no_grad():
        y = T.relu(x)
    assert y.grad_fn is None and not y.requires_grad
    y = T.relu(torch.randn(4))
    assert y.grad_fn is None


def test_outputs_are_tensors_viewing_shared_memory(T):
    c = T.client
    live = c._live
    y = T.relu(torch.ones(16))
    assert isinstance(y, torch.Tensor) and c.region_of(y.data_ptr(), 64) is not None
    assert c._live == live + 1
    v = y[4:8]
    del y
    gc.collect()
    assert c._live == live + 1 and (v == 1).all()
    del v
    gc.collect()
    assert c._live == live


def test_zero_copy_for_mxop_tensors(T):
    c = T.client
    x = mt.zeros((128, 128), client=c) - 1  # a torch result: heap
    xs = mt.to_shared(x, client=c)
    T.relu(xs)
    s0 = staged(c)
    y = T.relu(xs)
    z = T.relu(y)  # an output feeds the next op without a copy
    w = T.gemm(z, xs)
    assert staged(c) == s0
    T.relu(x)
    assert staged(c) == s0 + x.numel() * 4  # a plain tensor: one copy, counted
    assert (w == 0).all()


def test_zero_copy_after_share_memory(T):
    c = T.client
    x = torch.randn(64, 32)
    x.share_memory_()
    before = mt.shared_regions(c)
    y = T.relu(x)  # registers the storage's fd once
    assert mt.shared_regions(c) == before + 1
    s0 = staged(c)
    for _ in range(3):
        y = T.relu(x)
    T.relu(x[8:16])  # a view of the same storage
    assert staged(c) == s0, "a share_memory_() tensor was copied"
    assert mt.shared_regions(c) == before + 1  # cached per storage
    torch.testing.assert_close(y, torch.relu(x))
    # Writes through torch are seen by the worker: the memory is the same.
    x.fill_(2.0)
    assert (T.relu(x) == 2).all()
    # When the storage dies its region is released.
    regions = c.stats().regions
    del x
    gc.collect()
    assert mt.shared_regions(c) == before
    assert c.stats().regions == regions - 1


def test_non_contiguous_tensor_copied_once(T):
    c = T.client
    x = torch.randn(8, 6)
    s0, n0 = staged(c), c.staged_copies
    y = T.relu(x.t())
    torch.testing.assert_close(y, torch.relu(x.t()))
    assert staged(c) == s0 and c.staged_copies == n0 + 1


def test_autograd_grads_from_expanded_ograds(T):
    # sum().backward() hands ones expanded with stride 0: not contiguous.
    x = torch.randn(3, 4, requires_grad=True)
    T.relu(x).sum().backward()
    torch.testing.assert_close(x.grad, (x > 0).float())


class MLP(torch.nn.Module):
    def __init__(self, gemm):
        super().__init__()
        self.fc1 = mt.Linear(4, 8, gemm)
        self.fc2 = torch.nn.Linear(8, 3)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


def test_linear_module_trains_like_nn_linear(T):
    torch.manual_seed(3)
    m = MLP(T.gemm)
    ref = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
    with torch.no_grad():
        ref[0].weight.copy_(m.fc1.weight)
        ref[0].bias.copy_(m.fc1.bias)
        ref[2].weight.copy_(m.fc2.weight)
        ref[2].bias.copy_(m.fc2.bias)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    opt2 = torch.optim.SGD(ref.parameters(), lr=0.1)
    x = torch.randn(32, 4)
    t = torch.randint(0, 3, (32,))
    for _ in range(5):
        for model, o in ((m, opt), (ref, opt2)):
            o.zero_grad()
            torch.nn.functional.cross_entropy(model(x), t).backward()
            o.step()
    torch.testing.assert_close(m.fc1.weight, ref[0].weight)
    torch.testing.assert_close(m(x), ref(x))
    assert "in_features=4" in repr(m)


def test_op_module(T):
    m = torch.nn.Sequential(mt.OpModule(T.relu), mt.OpModule(T.softmax))
    x = torch.randn(2, 5)
    torch.testing.assert_close(m(x), torch.softmax(torch.relu(x), -1))


def test_stateful_torch_op(T):
    st = T.running_mean_norm.create_state(torch.zeros(4, 3, dtype=torch.float64), momentum=1)
    x = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
    y = st(x)
    torch.testing.assert_close(y, x - x.mean(0))
    y.backward(torch.ones_like(y))
    assert (x.grad == 1).all()
    st.close()


def test_worker_crash_in_autograd_raises_and_training_goes_on(T):
    x = torch.randn(4, requires_grad=True)
    with pytest.raises(mxop.WorkerCrashed):
        T.segv(x)
    y = T.identity(x)
    y.sum().backward()
    assert (x.grad == 1).all()


def test_dtypes(T):
    for dt in (torch.float32, torch.float64):
        x = torch.randn(5, dtype=dt)
        y = T.relu(x)
        assert y.dtype == dt
    y = T.identity(torch.arange(6, dtype=torch.int64))
    assert y.dtype == torch.int64 and y.tolist() == list(range(6))
    y = T.identity(torch.ones(3, dtype=torch.bfloat16))
    assert y.dtype == torch.bfloat16 and (y == 1).all()


def test_dead_storage_region_is_not_mistaken_for_new_memory(T):
    c = T.client
    x = torch.randn(1024)
    x.share_memory_()
    T.relu(x)
    ptr = x.data_ptr()
    # The storage is a region of the client that libmxop is never told the
    # address of: only a live tensor of that storage is passed as it.
    n = mt.shared_regions(c)
    assert n >= 1 and c.region_of(ptr, 4) is None
    regions = c.stats().regions
    del x
    gc.collect()
    # Whatever is mapped at that address now, it is not the old region.
    assert c.region_of(ptr, 4) is None
    assert mt.shared_regions(c) == n - 1
    assert c.stats().regions == regions - 1
