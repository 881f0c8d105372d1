"""Tensors into mxop_array_t records, and a call of an op on tensors.

A CPU tensor whose memory is an mxop allocation, or lies in a shared storage
(registered once as a region, _torch_storage), passes without a copy; any
other contiguous tensor is staged by libmxop; a non-contiguous one is copied
once into a new mxop allocation here (counted in Client.staged_copies).
Outputs are tensors viewing shared memory (no copy).  CUDA tensors go
through _torch_cuda.
"""


import numpy as np
import torch

from . import _fast, _lib
from ._lib import lib as _lib_
from ._memory import view as _view
from ._records import ARRAY_SIZE, OutSpec, ZPAD, pack_array as _pack_array
from ._torch_calls import call
from ._torch_cuda import backward_cuda, forward_cuda, pack_cuda
from ._torch_dtypes import CODE_OF_TORCH, TORCH_OF
from ._torch_storage import region_of as _storage_region
from .errors import DtypeMismatch, NotSupported, ShapeMismatch

_from_numpy = torch.from_numpy
_Tensor = torch.Tensor
_strided = torch.strided

def copy_to_shm(c, t, code, keep):
    """A contiguous copy of `t` in a new mxop allocation (the one copy of a
    non-contiguous tensor)."""
    spec = OutSpec(code, tuple(t.shape))
    b = c.alloc(code, spec.ndim, spec.caddr)
    dst = tensor_view(b, spec)
    dst.copy_(t)
    dst._mxop_copy_of = t  # for an input the op writes: its write is copied back
    keep.append(dst)
    c.staged_copies += 1
    c.staged_copy_bytes += spec.nbytes
    return b


def refuse(name, i, t):
    """The error for tensor `t`, input i of op `name`, that mxop cannot pass
    (None when it can): it names the op, the input and what is wrong."""
    what = "mxop op '%s': input %d" % (name, i)
    if t.is_quantized:
        return NotSupported("%s is a quantized tensor (%s); mxop ops take plain "
                            "tensors: call .dequantize() first" % (what, t.dtype))
    if t.layout is not _strided:
        return NotSupported("%s is a sparse or other non-dense tensor (%s); mxop ops "
                            "take dense (strided) tensors: call .to_dense() first"
                            % (what, t.layout))
    if CODE_OF_TORCH.get(t.dtype) is None:
        return DtypeMismatch("%s has dtype %s, which mxop cannot pass (it passes %s)"
                             % (what, t.dtype, ", ".join(sorted(
                                 str(d).replace("torch.", "") for d in CODE_OF_TORCH))))
    if t.dim() > _lib.MAX_DIMS:
        return ShapeMismatch("%s has %d dimensions; mxop allows at most %d"
                             % (what, t.dim(), _lib.MAX_DIMS))
    return None


def pack_tensor(c, buf, i, t, keep, devs=None, name="?"):
    """Writes input record i for tensor `t` (an input of op `name`); returns
    (dtype, shape).  A CUDA tensor's device is appended to `devs`."""
    if type(t) is not _Tensor and not isinstance(t, _Tensor):
        if isinstance(t, np.ndarray):
            return c.pack_numpy(buf, i, t, keep)
        t = torch.as_tensor(t)
        keep.append(t)
    if t.layout is not _strided or t.is_quantized or t.dim() > _lib.MAX_DIMS:
        raise refuse(name, i, t)
    if t.device.type != "cpu":
        if t.device.type != "cuda" or devs is None:
            raise NotSupported("op '%s': input %d is on %s; mxop passes CPU and CUDA "
                               "tensors only" % (name, i, t.device))
        devs.append(t.device)
        return pack_cuda(c, buf, i, t, keep, 0)
    code = CODE_OF_TORCH.get(t.dtype)
    if code is None:
        raise refuse(name, i, t)
    shape = tuple(t.shape)
    ndim = len(shape)
    nbytes = t.numel() * t.element_size()
    if not t.is_contiguous():
        b = copy_to_shm(c, t, code, keep)
        _pack_array(buf, i * ARRAY_SIZE, b.data, code, ndim, *shape, *ZPAD[ndim],
                    b.region, b.offset, nbytes, 0)
        return code, shape
    ptr = t.data_ptr()
    # A shared storage's tensor goes as (its storage's region, offset);
    # anything else as region 0 and its pointer: libmxop finds the region
    # it lies in (an mxop allocation), else stages it.
    ro = _storage_region(c, t) if nbytes > 0 and t.is_shared() else None
    if ro is None:
        _pack_array(buf, i * ARRAY_SIZE, ptr, code, ndim, *shape, *ZPAD[ndim], 0, 0, nbytes, 0)
    else:
        _pack_array(buf, i * ARRAY_SIZE, ptr, code, ndim, *shape, *ZPAD[ndim],
                    ro[0], ro[1], nbytes, 0)
    return code, shape


def numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def tensor_view(b, spec):
    """A tensor viewing block `b` (holds it alive through the NumPy base)."""
    if spec.npdtype is not None:
        return _from_numpy(_view(b, spec.npdtype, spec.shape))
    # bfloat16: no NumPy dtype; view the bytes and reinterpret.
    raw = _from_numpy(_view(b, np.dtype(np.uint8), (b.nbytes,)))
    return raw.view(TORCH_OF[spec.dtype]).reshape(spec.shape)


def forward(op, ent, tensors):
    fc = _fast.fc
    if fc and op.fast:
        # The whole call in C (_fastcall.c); NotImplemented: a case for the
        # code below (non-contiguous, CUDA, storages to register, bf16...).
        r = fc.call(op.client, op, ent, tensors, 1, None, 0)
        if r is not NotImplemented:
            return r
    c = op.client
    h = c.check_handle()
    n_in = len(tensors)
    n_out = op.num_outputs
    bufs = c.records(n_in, n_out)
    keep = []
    devs = []
    try:
        ib = bufs[0]
        name = op.name
        sig = tuple([pack_tensor(c, ib, i, t, keep, devs, name)
                     for i, t in enumerate(tensors)])
        # Inputs written in place that went as a copy (non-contiguous): the
        # op's write is copied back into them after the call.
        back = ()
        mut = op.mutated_inputs
        if mut and keep:
            back = tuple((t, k) for i, t in enumerate(tensors) for k in keep
                         if mut >> i & 1 and isinstance(t, _Tensor) and k is not t and
                         isinstance(k, _Tensor) and getattr(k, "_mxop_copy_of", None) is t)
        specs = op.specs(ent, sig)
        if devs:
            outs = forward_cuda(c, h, op, ent, bufs, n_in, specs, devs, keep)
            with torch.no_grad():
                for t, k in back:
                    t.copy_(k)
            return outs
        ob_addr = bufs[3]
        blocks = c.alloc_outputs(specs, ob_addr)
        call(c, _lib_.mxop_forward, h, op.pointer, ent.addr, bufs[1], n_in, ob_addr, n_out)
        if back:
            with torch.no_grad():
                for t, k in back:
                    t.copy_(k)
        if op.dynamic_outputs:
            # A dynamic output's real shape, written into its record by the
            # call: a view of the front of the block its largest shape took.
            real = op.real_specs(specs, ob_addr)
            return tuple([tensor_view(b, s).reshape(-1)[:numel(r.shape)].view(r.shape)
                          for b, s, r in zip(blocks, specs, real)])
        return tuple([tensor_view(b, s) for b, s in zip(blocks, specs)])
    finally:
        c.give_records(bufs)


def backward(op, ent, grads, inputs, outputs, needs):
    fc = _fast.fc
    if fc:
        r = fc.call(op.client, op, ent, tuple(grads) + tuple(inputs) + tuple(outputs), 2,
                    tuple(needs), len(grads))
        if r is not NotImplemented:
            return r
    c = op.client
    h = c.check_handle()
    allin = tuple(grads) + tuple(inputs) + tuple(outputs)
    n_fwd = len(inputs)
    bufs = c.records(len(allin), n_fwd)
    keep = []
    devs = []
    try:
        ib = bufs[0]
        sig = [pack_tensor(c, ib, i, t, keep, devs, op.name) for i, t in enumerate(allin)]
        off = len(grads)
        if devs:
            return backward_cuda(c, h, op, ent, bufs, len(allin), sig, off, needs, devs, keep)
        ob_addr = bufs[3]
        specs = [OutSpec(*sig[off + i]) for i in range(n_fwd)]
        blocks = c.alloc_outputs(specs, ob_addr, needs)
        call(c, _lib_.mxop_backward, h, op.pointer, ent.addr, bufs[1], len(allin), ob_addr, n_fwd)
        return tuple([tensor_view(b, s) if needs[i] else None
                      for i, (b, s) in enumerate(zip(blocks, specs))])
    finally:
        c.give_records(bufs)

