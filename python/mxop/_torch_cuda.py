"""CUDA tensors as device regions.

The CUDA allocation holding each tensor (a block of PyTorch's caching
allocator) is registered once as a device region (mxop_region_register_cuda
on its data_ptr: its CUDA IPC handle, opened once by the worker); the ids
are kept in the client's device_regions.  Outputs are allocated with
torch.empty on the inputs' device.  Before each call the current stream of
the device is synchronised (the op reads what it produced).
"""

import ctypes

import torch

from . import _lib
from ._lib import lib as _lib_
from ._records import ARRAY_SIZE, ZPAD, pack_array as _pack_array
from ._torch_calls import call
from ._torch_dtypes import CODE_OF_TORCH, TORCH_OF
from .errors import InvalidArgument

_register_cuda = None


def register_cuda_fn():
    """libmxop's mxop_region_register_cuda, declared on first use."""
    global _register_cuda
    if _register_cuda is None:
        f = _lib_.mxop_region_register_cuda
        f.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t,
                      ctypes.POINTER(ctypes.c_uint32), ctypes.POINTER(ctypes.c_uint64)]
        f.restype = ctypes.c_int
        _register_cuda = f
    return _register_cuda


def pack_cuda(c, buf, i, t, keep, req):
    """Writes array record i of `buf` for CUDA tensor `t`: its allocation
    registered as a device region (once; libmxop finds it again), the
    tensor an offset in it.  Returns (dtype, shape)."""
    code = CODE_OF_TORCH.get(t.dtype)
    if code is None:
        raise InvalidArgument("tensor %d: torch dtype %s has no mxop equivalent"
                              % (i, t.dtype))
    if not t.is_contiguous():
        src = t
        t = t.contiguous()
        t._mxop_copy_of = src  # for an input the op writes: its write is copied back
        keep.append(t)
    shape = tuple(t.shape)
    ndim = len(shape)
    if ndim > _lib.MAX_DIMS:
        raise InvalidArgument("tensor %d has %d dimensions; mxop allows at most %d"
                              % (i, ndim, _lib.MAX_DIMS))
    nbytes = t.numel() * t.element_size()
    ptr = t.data_ptr()
    if ptr == 0:
        # An empty tensor may own no memory: any allocation on its device will do.
        spare = torch.empty(1, dtype=torch.uint8, device=t.device)
        keep.append(spare)
        ptr = spare.data_ptr()
    region = ctypes.c_uint32()
    offset = ctypes.c_uint64()
    rc = register_cuda_fn()(c.check_handle(), ptr, nbytes, ctypes.byref(region),
                            ctypes.byref(offset))
    if rc < 0:
        raise c.error(rc)
    c.device_regions.add(region.value)
    _pack_array(buf, i * ARRAY_SIZE, ptr, code, ndim, *shape, *ZPAD[ndim],
                region.value, offset.value, nbytes, req)
    return code, shape


def sync(devs):
    """The engine's half of the ordering: work queued on the current
    streams (which produced the inputs) is done before the worker reads."""
    for d in set(devs):
        torch.cuda.current_stream(d).synchronize()


def release_cuda_regions(client):
    """Releases every device region this layer registered for `client`
    (the worker closes their IPC handles).  Call it before memory the
    worker may hold open is freed, e.g. before torch.cuda.empty_cache();
    later calls register what they use again."""
    ids = client.device_regions
    n = 0
    while ids:
        rid = ids.pop()
        if _lib_.mxop_region_release(client.check_handle(), rid) == 0:
            n += 1
    return n


def cuda_regions(client):
    """Number of device regions this layer registered for `client`."""
    return len(client.device_regions)


def forward_cuda(c, h, op, ent, bufs, n_in, specs, devs, keep):
    dev = devs[0]
    ob = bufs[2]
    outs = []
    for i, s in enumerate(specs):
        o = torch.empty(s.shape, dtype=TORCH_OF[s.dtype], device=dev)
        pack_cuda(c, ob, i, o, keep, 0)
        outs.append(o)
    sync(devs)
    call(c, _lib_.mxop_forward, h, op.pointer, ent.addr, bufs[1], n_in, bufs[3], len(specs))
    return tuple(outs)


def backward_cuda(c, h, op, ent, bufs, n_all, sig, off, needs, devs, keep):
    dev = devs[0]
    ob = bufs[2]
    outs = []
    for i in range(len(needs)):
        dt, shape = sig[off + i]
        g = torch.empty(shape, dtype=TORCH_OF[dt], device=dev)
        pack_cuda(c, ob, i, g, keep, 0 if needs[i] else _lib.REQ_NULL)
        outs.append(g)
    sync(devs)
    call(c, _lib_.mxop_backward, h, op.pointer, ent.addr, bufs[1], n_all, bufs[3], len(needs))
    return tuple([g if needs[i] else None for i, g in enumerate(outs)])

