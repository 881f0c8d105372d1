"""CUDA tensors through the PyTorch layer (device regions, GPU ops).

The tests that need a GPU are skipped, with the reason, where torch sees
none or the CUDA op library was not built; the no-device answer is
checked everywhere.
"""
import ctypes
import os

import pytest
import torch

import mxop
import mxop.torch as mt
from mxop import _torch_cuda

from conftest import BUILD

HAVE_GPU = torch.cuda.is_available()
HAVE_LIB = os.path.exists(os.path.join(BUILD, "plugins", "relu_cuda.so"))
needs_gpu = pytest.mark.skipif(
    not HAVE_GPU, reason="no CUDA device: torch.cuda.is_available() is False (torch %s, CUDA %s)"
    % (torch.__version__, torch.version.cuda))
needs_lib = pytest.mark.skipif(
    not HAVE_LIB, reason="relu_cuda.so is not built (the build found no CUDA toolkit)")


def test_register_cuda_without_a_device_says_so(client):
    """A pointer that is not device memory: NoDevice without a GPU, else InvalidArgument."""
    f = _torch_cuda.register_cuda_fn()
    region, offset = ctypes.c_uint32(), ctypes.c_uint64()
    host = ctypes.create_string_buffer(64)
    rc = f(client._handle(), ctypes.addressof(host), 64, ctypes.byref(region),
           ctypes.byref(offset))
    err = client._error(rc)
    # A working driver says "not CUDA memory" (also where torch has no CUDA).
    if HAVE_GPU or isinstance(err, mxop.InvalidArgument):
        assert isinstance(err, mxop.InvalidArgument), err
        assert "not CUDA memory" in err.message, err.message
    else:
        assert isinstance(err, mxop.NoDevice), err
        assert err.message.startswith("no CUDA device"), err.message
    assert region.value == 0
    # The session goes on.
    relu = client.load("relu.so").relu
    import numpy as np
    y = relu(np.array([-1.0, 2.0]))
    assert list(y) == [0.0, 2.0]


def test_cuda_error_code_is_known():
    assert mxop.CudaError.code == -1035
    assert mxop.err_name(-1035) == "MXOP_ECUDA"


@needs_lib
def test_relu_cuda_host_path(client):
    ops = mt.load(client, "relu_cuda.so")
    x = torch.randn(5, 6, dtype=torch.float64, requires_grad=True)
    y = ops.relu_cuda(x)
    torch.testing.assert_close(y, torch.relu(x))
    y.sum().backward()
    torch.testing.assert_close(x.grad, (x > 0).double())


@needs_gpu
@needs_lib
def test_relu_cuda_on_cuda_tensors_zero_copy(client):
    ops = mt.load(client, "relu_cuda.so")
    dev = torch.device("cuda", 0)
    big = torch.randn(4096 + 17, device=dev)
    x = big[17:].view(64, 64).requires_grad_()  # inside a larger allocation
    y = ops.relu_cuda(x)
    assert y.device == dev
    torch.testing.assert_close(y, torch.relu(x))
    g = torch.randn_like(y)
    y.backward(g)
    torch.testing.assert_close(x.grad, g * (x > 0))
    n = mt.cuda_regions(client)
    for _ in range(5):
        ops.relu_cuda(x.detach())
    assert mt.cuda_regions(client) <= n + 5  # outputs may land in new blocks, inputs do not
    assert mt.release_cuda_regions(client) >= 1


@needs_gpu
@needs_lib
def test_matmul_cuda_matches_torch(client):
    ops = mt.load(client, "relu_cuda.so")
    a = torch.randn(33, 17, dtype=torch.float64, device="cuda", requires_grad=True)
    b = torch.randn(17, 9, dtype=torch.float64, device="cuda", requires_grad=True)
    c = ops.matmul_cuda(a, b)
    torch.testing.assert_close(c, a @ b)
    c.sum().backward()
    torch.testing.assert_close(a.grad, torch.ones(33, 9, dtype=torch.float64, device="cuda")
                               @ b.detach().T)


@needs_gpu
@needs_lib
def test_mixed_devices_are_refused(client):
    ops = mt.load(client, "relu_cuda.so")
    a = torch.randn(3, 4, device="cuda")
    b = torch.randn(4, 2)
    with pytest.raises(mxop.InvalidArgument, match="device mismatch"):
        ops.matmul_cuda(a, b)
