"""The C call path (python/mxop/_fastcall.c) and its ctypes fallback.

The same calls run in this process (the C path, when the build has it)
and in child processes with MXOP_NO_FASTCALL=1 (the ctypes path): both
must give the reference results, the same errors, and keep the same
accounting of arena blocks.
"""
import json
import os
import subprocess
import threading

import numpy as np
import pytest

import mxop
from mxop import _lib
from mxop import _fast, client as _cl

from conftest import PYTHON, SOURCE, staged

BUILT = os.path.exists(os.path.join(_lib.build_dir(), "python", "_fastcall.so"))

# Run by a child: every case below on the daemon at argv[1]; prints JSON.
SCENARIO = r"""
import json, sys
import numpy as np
import torch
import mxop, mxop.torch as mt
from mxop import _fast

c = mxop.connect(sys.argv[1], timeout=20)
relu = c.load("relu.so").relu
gemm = c.load("gemm.so").gemm
c.load("crash.so")
out = {"fast": bool(_fast.fc)}
x = np.linspace(-2, 2, 12).astype(np.float32).reshape(3, 4)
y = relu(x)
out["relu_heap"] = y.tolist()
out["relu_base"] = type(y.base).__name__
xs = c.asarray(x)
out["relu_shm"] = relu(xs).tolist()
try:
    relu(np.arange(-3, 3, dtype=np.int32))
    out["relu_i32"] = None
except mxop.MxopError as e:
    out["relu_i32"] = type(e).__name__
a = np.arange(6, dtype=np.float64).reshape(2, 3)
b = np.arange(6, dtype=np.float64).reshape(2, 3)
out["gemm_tb"] = gemm(a, b, transpose_b=True).tolist()
try:
    gemm(a, b)
    out["gemm_bad"] = None
except mxop.MxopError as e:
    out["gemm_bad"] = type(e).__name__
try:
    c.op("segv")(np.zeros(4, np.float32))
    out["segv"] = None
except mxop.MxopError as e:
    out["segv"] = type(e).__name__
out["after_crash"] = relu(x).tolist()
t = torch.linspace(-1, 1, 5, requires_grad=True)
tr = mt.TorchOp(relu)
o = tr(t)
(o * torch.arange(5.0)).sum().backward()
out["torch_fwd"] = o.tolist()
out["torch_grad"] = t.grad.tolist()
out["torch_nograd"] = tr(torch.linspace(-1, 1, 5)).tolist()
out["torch_ops"] = torch.ops.mxop.relu(torch.linspace(-1, 1, 5)).tolist()
out["torch_noncontig"] = tr(torch.arange(-4.0, 4.0).reshape(2, 4).t()).tolist()
host = mt.TorchOp(c.load("opkit_host.so").host_apply)
xd = torch.tensor([-1.0, 2.5], dtype=torch.float64)
out["torch_bf16"] = host(xd, xd, fn="convert", to=3).float().tolist()
ti = torch.tensor([3, -4], dtype=torch.int32)
out["torch_i32"] = host(ti, ti, fn="add").tolist()
hi = c.op("host_apply").bind(fn="mul")
out["numpy_u8"] = hi(np.array([2, 3], np.uint8), np.array([5, 7], np.uint8)).tolist()
out["torch_empty"] = list(tr(torch.zeros(0, 3)).shape)
live = c._live
keep = [relu(x) for _ in range(3)]
out["live_delta"] = c._live - live
del keep
out["live_after"] = c._live - live
c.close()
print(json.dumps(out))
"""


def _scenario(daemon, fast):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.join(SOURCE, "python")
    env["MXOP_BUILD_DIR"] = _lib.build_dir()
    if fast:
        env.pop("MXOP_NO_FASTCALL", None)
    else:
        env["MXOP_NO_FASTCALL"] = "1"
    p = subprocess.run([PYTHON, "-c", SCENARIO, daemon.socket], env=env, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout.strip().splitlines()[-1])


def _check(r):
    x = np.linspace(-2, 2, 12).astype(np.float32).reshape(3, 4)
    np.testing.assert_array_equal(r["relu_heap"], np.maximum(x, 0))
    np.testing.assert_array_equal(r["relu_shm"], np.maximum(x, 0))
    assert r["relu_i32"] == "DtypeMismatch"
    a = np.arange(6, dtype=np.float64).reshape(2, 3)
    np.testing.assert_allclose(r["gemm_tb"], a @ a.T)
    assert r["gemm_bad"] == "ShapeMismatch"
    assert r["segv"] == "WorkerCrashed"
    np.testing.assert_array_equal(r["after_crash"], np.maximum(x, 0))
    assert r["torch_fwd"] == [0.0, 0.0, 0.0, 0.5, 1.0]
    assert r["torch_grad"] == [0.0, 0.0, 0.0, 3.0, 4.0]
    assert r["torch_nograd"] == [0.0, 0.0, 0.0, 0.5, 1.0]
    assert r["torch_ops"] == [0.0, 0.0, 0.0, 0.5, 1.0]
    assert r["torch_noncontig"] == [[0, 0], [0, 1], [0, 2], [0, 3]]
    assert r["torch_bf16"] == [-1.0, 2.5]
    assert r["torch_i32"] == [6, -8]
    assert r["numpy_u8"] == [10, 21]
    assert r["torch_empty"] == [0, 3]
    assert r["live_delta"] == 3 and r["live_after"] == 0


def test_ctypes_fallback_gives_the_same_results(daemon):
    slow = _scenario(daemon, fast=False)
    assert slow["fast"] is False
    assert slow["relu_base"] != "Block"  # a ctypes buffer
    _check(slow)
    fast = _scenario(daemon, fast=True)
    assert fast["fast"] is BUILT
    if BUILT:
        assert fast["relu_base"] == "Block"
    _check(fast)
    assert {k: v for k, v in fast.items() if k not in ("fast", "relu_base")} == \
        {k: v for k, v in slow.items() if k not in ("fast", "relu_base")}


@pytest.mark.skipif(not BUILT, reason="build/python/_fastcall.so not built")
def test_fast_path_is_used_when_built(ops):
    assert _fast.fc, "the extension is built but the bindings did not load it"
    y = ops.op("relu")(np.array([-1.0, 2.0], np.float32))
    assert type(y.base) is _fast.fc.Block
    assert _cl.block_of(y) is y.base and ops.owns(y)


@pytest.mark.skipif(not BUILT, reason="build/python/_fastcall.so not built")
def test_fast_outputs_outlive_the_client_close(daemon):
    c = mxop.connect(daemon, timeout=20)
    relu = c.load("relu.so").relu
    y = relu(np.array([-1.0, 5.0], np.float32))
    assert c._live == 1
    c.close()
    assert c.closed and c._h  # the session waits for y
    np.testing.assert_array_equal(y, [0, 5])
    del y
    assert c._h is None and c._live == 0


def test_threads_share_one_client_through_torch(ops):
    torch = pytest.importorskip("torch")
    import mxop.torch as mt

    tr = mt.TorchOp(ops.op("relu"))
    errors = []

    def work(k):
        try:
            for i in range(150):
                x = torch.full((32,), float(k * 1000 + i) * (-1) ** i, dtype=torch.float64)
                x.requires_grad_(i % 3 == 0)
                y = tr(x)
                assert torch.equal(y.detach(), torch.relu(x.detach())), (k, i)
                if x.requires_grad:
                    y.sum().backward()
                    assert torch.equal(x.grad, (x.detach() > 0).double()), (k, i)
        except Exception as e:  # reported below
            errors.append(e)

    ts = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors, errors[0]


@pytest.mark.skipif(not BUILT, reason="build/python/_fastcall.so not built")
def test_a_shared_storage_goes_by_the_c_path_by_reference(ops, monkeypatch):
    """A tensor in a shared storage (a DataLoader batch) is taken by the C
    path: the storage registry gives its region, nothing is staged."""
    torch = pytest.importorskip("torch")
    import mxop.torch as mt
    from mxop import _torch_pack
    if torch.multiprocessing.get_sharing_strategy() != "file_descriptor":
        pytest.skip("storages are shared by file descriptor only")
    relu = mt.load(ops, "relu.so").relu
    x = torch.linspace(-2, 2, 1 << 16).share_memory_()
    x.requires_grad_(False)

    def ctypes_path(*a, **k):
        raise AssertionError("the shared tensor went to the ctypes path")

    monkeypatch.setattr(_torch_pack, "pack_tensor", ctypes_path)
    before = staged(ops)
    for _ in range(3):
        y = relu(x)
        assert torch.equal(y, torch.relu(x))
    assert staged(ops) == before
    assert mt.shared_regions(ops) == 1
