"""mxop ops as PyTorch functions with autograd.

    import mxop, mxop.torch
    c = mxop.connect()
    gemm = mxop.torch.load(c, "gemm.so").gemm       # a TorchOp
    y = gemm(a, b, transpose_b=True)                # tensors in, tensors out
    y.sum().backward()                              # through the op's backward

Each call is a torch.autograd.Function: forward runs the op, backward runs
its backward with in = [output gradients, inputs, outputs].  TorchOps work
inside nn.Modules (see Linear and OpModule below).

Memory (CPU tensors):
  - a tensor whose memory is an mxop allocation (an op output, or
    mxop.torch.empty/zeros) passes without a copy;
  - a tensor after share_memory_() passes without a copy: its storage's
    file descriptor (torch 1.13: storage._share_fd_cpu_()) is registered
    once as a region, cached per storage and released when the storage dies;
  - any other contiguous tensor is staged by libmxop (one copy, counted in
    Stats.staged_bytes); a non-contiguous one is copied once into a new
    mxop allocation here (counted in Client.staged_copies).
Outputs are tensors viewing shared memory (no copy); the allocation lives
as long as any tensor or array viewing it.

Memory (CUDA tensors): the same ops take CUDA tensors with no copy.  The
CUDA allocation holding each tensor (a block of PyTorch's caching
allocator) is registered once as a device region (mxop_region_register_cuda
on its data_ptr: its CUDA IPC handle, opened once by the worker), outputs
are allocated with torch.empty on the inputs' device, and the op's
forward_gpu / backward_gpu run in the worker.  Ordering: before each call
the current stream of the device is synchronised (the op reads what it
produced); the worker synchronises its own stream before answering, so
the outputs are complete on return.  All tensors of a call must be on one
device.  Without a CUDA device (or driver) the call raises NoDevice.
Before torch.cuda.empty_cache() (which frees cached blocks the worker may
hold open), call release_cuda_regions(client).
"""

import ctypes
import os

import numpy as np
import torch
from torch.autograd import forward_ad as _fwad

from . import _interrupt
from . import _lib
from . import _torch_fake
from . import _torch_library as _tl
from . import client as _cl
from .client import Client, Op, _OutSpec, _ZPAD, _ASZ
from .errors import (InvalidArgument, NotSupported, InvalidAttribute, ArityMismatch,
                     ShapeMismatch, DtypeMismatch, UnknownOp)

_lib_ = _lib.lib
_pack_array = _lib.ARRAY_STRUCT.pack_into
_memmove = ctypes.memmove
_addressof = ctypes.addressof
_from_numpy = torch.from_numpy
_Tensor = torch.Tensor
_strided = torch.strided

_MX_OF_TORCH = {getattr(torch, name): code for name, code in _cl._MX_OF_TORCH_NAME.items()}
_TORCH_OF = {v: k for k, v in _MX_OF_TORCH.items()}


def dtype_code(dtype):
    """The mxop dtype number of a torch dtype."""
    code = _MX_OF_TORCH.get(dtype)
    if code is None:
        raise InvalidArgument(-1001, "torch dtype %s has no mxop equivalent" % dtype)
    return code


# ---- shared storages as regions ---------------------------------------------

try:
    from torch.multiprocessing.reductions import StorageWeakRef as _StorageWeakRef
except ImportError:  # pragma: no cover - other torch versions
    _StorageWeakRef = None


class _StorageRegion:
    __slots__ = ("weak", "region", "base", "nbytes")


def _untyped(storage):
    return storage._storage if hasattr(storage, "_storage") else storage


def _sweep(c):
    """Releases the regions of storages that are gone."""
    cache = c._torch_regions
    for base, e in list(cache.items()):
        if e.weak is not None and e.weak.expired():
            del cache[base]
            try:
                e.region.release()
            except Exception:
                pass


def _register_storage(c, t):
    """Registers the shared storage of `t` as a region of `c` (once per
    storage); returns True if it is now in c's address table."""
    if _StorageWeakRef is None or torch.multiprocessing.get_sharing_strategy() != \
            "file_descriptor":
        return False
    s = t.storage()
    u = _untyped(s)
    base = u.data_ptr()
    nbytes = u.nbytes()
    cache = c._torch_regions
    e = cache.get(base)
    if e is not None:
        if not e.weak.expired() and e.nbytes == nbytes:
            return True  # the table has it (a region lookup missed for another reason)
        del cache[base]
        e.region.release()
    _sweep(c)
    try:
        fd, _ = s._share_fd_cpu_()
    except Exception:
        return False
    if u.data_ptr() != base:  # sharing moved the storage: look it up afresh
        return False
    e = _StorageRegion()
    e.weak = _StorageWeakRef(s)
    e.base = base
    e.nbytes = nbytes
    e.region = c.register_fd(fd, nbytes, base=base, check=lambda: _still_alive(c, e))
    cache[base] = e
    return True


def _still_alive(c, e):
    """A lookup landed in e's region: true while its storage lives (while it
    does, nothing else can be mapped at its address).  A dead one's region
    is released here, so that memory now at that address is not mistaken
    for it."""
    if not e.weak.expired():
        return True
    if c._torch_regions.get(e.base) is e:
        del c._torch_regions[e.base]
    try:
        e.region.release()
    except Exception:
        pass
    return False


def shared_regions(c):
    """Number of torch storages registered as regions of client `c` (live ones)."""
    _sweep(c)
    return len(c._torch_regions)


# ---- tensors <-> array records ----------------------------------------------

def _copy_to_shm(c, t, code, keep):
    """A contiguous copy of `t` in a new mxop allocation (the one copy of a
    non-contiguous tensor)."""
    spec = _OutSpec(code, tuple(t.shape))
    b = c._alloc(code, spec.ndim, spec.caddr)
    dst = _tensor_view(b, spec)
    dst.copy_(t)
    dst._mxop_copy_of = t  # for an input the op writes: its write is copied back
    keep.append(dst)
    c.staged_copies += 1
    c.staged_copy_bytes += spec.nbytes
    return b


def _refuse(name, i, t):
    """The error for tensor `t`, input i of op `name`, that mxop cannot pass
    (None when it can): it names the op, the input and what is wrong."""
    what = "mxop op '%s': input %d" % (name, i)
    if t.is_quantized:
        return NotSupported(-1023, "%s is a quantized tensor (%s); mxop ops take plain "
                            "tensors: call .dequantize() first" % (what, t.dtype))
    if t.layout is not _strided:
        return NotSupported(-1023, "%s is a sparse or other non-dense tensor (%s); mxop ops "
                            "take dense (strided) tensors: call .to_dense() first"
                            % (what, t.layout))
    if _MX_OF_TORCH.get(t.dtype) is None:
        return DtypeMismatch(-1017, "%s has dtype %s, which mxop cannot pass (it passes %s)"
                             % (what, t.dtype, ", ".join(sorted(
                                 str(d).replace("torch.", "") for d in _MX_OF_TORCH))))
    if t.dim() > _lib.MAX_DIMS:
        return ShapeMismatch(-1016, "%s has %d dimensions; mxop allows at most %d"
                             % (what, t.dim(), _lib.MAX_DIMS))
    return None


def _pack_tensor(c, buf, i, t, keep, devs=None, name="?"):
    """Writes input record i for tensor `t` (an input of op `name`); returns
    (dtype, shape).  A CUDA tensor's device is appended to `devs`."""
    if type(t) is not _Tensor and not isinstance(t, _Tensor):
        if isinstance(t, np.ndarray):
            return c._pack_np(buf, i, t, keep)
        t = torch.as_tensor(t)
        keep.append(t)
    if t.layout is not _strided or t.is_quantized or t.dim() > _lib.MAX_DIMS:
        raise _refuse(name, i, t)
    if t.device.type != "cpu":
        if t.device.type != "cuda" or devs is None:
            raise NotSupported(-1023, "op '%s': input %d is on %s; mxop passes CPU and CUDA "
                               "tensors only" % (name, i, t.device))
        devs.append(t.device)
        return _pack_cuda(c, buf, i, t, keep, 0)
    code = _MX_OF_TORCH.get(t.dtype)
    if code is None:
        raise _refuse(name, i, t)
    shape = tuple(t.shape)
    ndim = len(shape)
    nbytes = t.numel() * t.element_size()
    if not t.is_contiguous():
        b = _copy_to_shm(c, t, code, keep)
        _pack_array(buf, i * _ASZ, b.data, code, ndim, *shape, *_ZPAD[ndim],
                    b.region, b.offset, nbytes, 0)
        return code, shape
    ptr = t.data_ptr()
    ro = c._region_of(ptr, nbytes) if c._rbase else None
    if ro is None and nbytes > 0 and t.is_shared() and _register_storage(c, t):
        ptr = t.data_ptr()
        ro = c._region_of(ptr, nbytes)
    if ro is None:
        _pack_array(buf, i * _ASZ, ptr, code, ndim, *shape, *_ZPAD[ndim], 0, 0, nbytes, 0)
    else:
        _pack_array(buf, i * _ASZ, ptr, code, ndim, *shape, *_ZPAD[ndim],
                    ro[0], ro[1], nbytes, 0)
    return code, shape


# ---- the call itself ----------------------------------------------------------

_inflight = _interrupt.inflight


def _call(c, fn, *args):
    """fn(*args) (mxop_forward or mxop_backward) with the worker's pid in
    _interrupt.inflight, so that Ctrl-C can abandon the call; raises the
    call's error.  The pid is looked up once per worker (after a failure
    the worker may be a new one)."""
    d = c.__dict__
    _inflight[0] = d.get("_wpid", 0)
    try:
        rc = fn(*args)
    except BaseException:  # KeyboardInterrupt: the worker was killed
        _set_wpid(c, 0)
        raise
    finally:
        _inflight[0] = 0
    if rc < 0 or not d.get("_wpid"):
        _settle(c, rc)
    return rc


def _settle(c, rc):
    """After a call: raises its error (forgetting the worker's pid: it may be
    replaced), or looks the worker's pid up if it is not known yet."""
    d = c.__dict__
    if rc < 0:
        _set_wpid(c, 0)
        raise c._error(rc)
    try:
        _set_wpid(c, c.stats().worker_pid)
    except Exception:  # no stats: Ctrl-C then waits for the call
        _set_wpid(c, -1)


def _set_wpid(c, pid):
    """The session's worker pid, for Ctrl-C: here and in the C++ kernels."""
    c.__dict__["_wpid"] = pid
    t = _cl._tops
    if t is not None:
        t.wpid(c, pid)


# What the C call path needs of torch and of this module.
_cl._fast.set_torch(_Tensor, _from_numpy, _strided, dict(_MX_OF_TORCH), _settle, _inflight,
                    torch.is_grad_enabled, torch._C._get_tracing_state)


# ---- CUDA tensors as device regions ------------------------------------------

_register_cuda = None


def _cuda_fn():
    global _register_cuda
    if _register_cuda is None:
        f = _lib_.mxop_region_register_cuda
        f.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t,
                      ctypes.POINTER(ctypes.c_uint32), ctypes.POINTER(ctypes.c_uint64)]
        f.restype = ctypes.c_int
        _register_cuda = f
    return _register_cuda


def _cuda_regions(c):
    r = getattr(c, "_cuda_region_ids", None)
    if r is None:
        r = c._cuda_region_ids = set()
    return r


def _pack_cuda(c, buf, i, t, keep, req):
    """Writes array record i of `buf` for CUDA tensor `t`: its allocation
    registered as a device region (once; libmxop finds it again), the
    tensor an offset in it.  Returns (dtype, shape)."""
    code = _MX_OF_TORCH.get(t.dtype)
    if code is None:
        raise InvalidArgument(-1001, "tensor %d: torch dtype %s has no mxop equivalent"
                              % (i, t.dtype))
    if not t.is_contiguous():
        src = t
        t = t.contiguous()
        t._mxop_copy_of = src  # for an input the op writes: its write is copied back
        keep.append(t)
    shape = tuple(t.shape)
    ndim = len(shape)
    if ndim > _lib.MAX_DIMS:
        raise InvalidArgument(-1001, "tensor %d has %d dimensions; mxop allows at most %d"
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
    rc = _cuda_fn()(c._handle(), ptr, nbytes, ctypes.byref(region), ctypes.byref(offset))
    if rc < 0:
        raise c._error(rc)
    _cuda_regions(c).add(region.value)
    _pack_array(buf, i * _ASZ, ptr, code, ndim, *shape, *_ZPAD[ndim],
                region.value, offset.value, nbytes, req)
    return code, shape


def _sync(devs):
    """The engine's half of the ordering: work queued on the current
    streams (which produced the inputs) is done before the worker reads."""
    for d in set(devs):
        torch.cuda.current_stream(d).synchronize()


def release_cuda_regions(client):
    """Releases every device region this layer registered for `client`
    (the worker closes their IPC handles).  Call it before memory the
    worker may hold open is freed, e.g. before torch.cuda.empty_cache();
    later calls register what they use again."""
    ids = _cuda_regions(client)
    n = 0
    while ids:
        rid = ids.pop()
        if _lib_.mxop_region_release(client._handle(), rid) == 0:
            n += 1
    return n


def cuda_regions(client):
    """Number of device regions this layer registered for `client`."""
    return len(_cuda_regions(client))


def _forward_cuda(c, h, op, ent, bufs, n_in, specs, devs, keep):
    dev = devs[0]
    ob = bufs[2]
    outs = []
    for i, s in enumerate(specs):
        o = torch.empty(s.shape, dtype=_TORCH_OF[s.dtype], device=dev)
        _pack_cuda(c, ob, i, o, keep, 0)
        outs.append(o)
    _sync(devs)
    _call(c, _lib_.mxop_forward, h, op._p, ent.addr, bufs[1], n_in, bufs[3], len(specs))
    return tuple(outs)


def _backward_cuda(c, h, op, ent, bufs, n_all, sig, off, needs, devs, keep):
    dev = devs[0]
    ob = bufs[2]
    outs = []
    for i in range(len(needs)):
        dt, shape = sig[off + i]
        g = torch.empty(shape, dtype=_TORCH_OF[dt], device=dev)
        _pack_cuda(c, ob, i, g, keep, 0 if needs[i] else _lib.REQ_NULL)
        outs.append(g)
    _sync(devs)
    _call(c, _lib_.mxop_backward, h, op._p, ent.addr, bufs[1], n_all, bufs[3], len(needs))
    return tuple([g if needs[i] else None for i, g in enumerate(outs)])


def _numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def _tensor_view(b, spec):
    """A tensor viewing block `b` (holds it alive through the NumPy base)."""
    if spec.npdtype is not None:
        return _from_numpy(Client._view(b, spec.npdtype, spec.shape))
    # bfloat16: no NumPy dtype; view the bytes and reinterpret.
    raw = _from_numpy(Client._view(b, np.dtype(np.uint8), (b.nbytes,)))
    return raw.view(_TORCH_OF[spec.dtype]).reshape(spec.shape)


def _forward(op, ent, tensors):
    fc = _cl._fc
    if fc and op._fast:
        # The whole call in C (_fastcall.c); NotImplemented: a case for the
        # code below (non-contiguous, CUDA, storages to register, bf16...).
        r = fc.call(op.client, op, ent, tensors, 1, None, 0)
        if r is not NotImplemented:
            return r
    c = op.client
    h = c._handle()
    n_in = len(tensors)
    n_out = op.num_outputs
    bufs = c._bufs(n_in, n_out)
    keep = []
    devs = []
    try:
        ib = bufs[0]
        name = op.name
        sig = tuple([_pack_tensor(c, ib, i, t, keep, devs, name)
                     for i, t in enumerate(tensors)])
        # Inputs written in place that went as a copy (non-contiguous): the
        # op's write is copied back into them after the call.
        back = ()
        mut = op.mutated_inputs
        if mut and keep:
            back = tuple((t, k) for i, t in enumerate(tensors) for k in keep
                         if mut >> i & 1 and isinstance(t, _Tensor) and k is not t and
                         isinstance(k, _Tensor) and getattr(k, "_mxop_copy_of", None) is t)
        specs = op._specs(ent, sig)
        if devs:
            outs = _forward_cuda(c, h, op, ent, bufs, n_in, specs, devs, keep)
            with torch.no_grad():
                for t, k in back:
                    t.copy_(k)
            return outs
        ob_addr = bufs[3]
        blocks = []
        for i, s in enumerate(specs):
            b = c._alloc(s.dtype, s.ndim, s.caddr)
            _memmove(ob_addr + i * _ASZ, _addressof(b), _ASZ)
            blocks.append(b)
        # _call, inlined: this is the hot path of every forward.
        d = c.__dict__
        _inflight[0] = d.get("_wpid", 0)
        try:
            rc = _lib_.mxop_forward(h, op._p, ent.addr, bufs[1], n_in, ob_addr, n_out)
        except BaseException:  # KeyboardInterrupt: the worker was killed
            _set_wpid(c, 0)
            raise
        finally:
            _inflight[0] = 0
        if rc < 0 or not d.get("_wpid"):
            _settle(c, rc)
        if back:
            with torch.no_grad():
                for t, k in back:
                    t.copy_(k)
        if op.dynamic_outputs:
            # A dynamic output's real shape, written into its record by the
            # call: a view of the front of the block its largest shape took.
            real = op._real_specs(specs, ob_addr)
            return tuple([_tensor_view(b, s).reshape(-1)[:_numel(r.shape)].view(r.shape)
                          for b, s, r in zip(blocks, specs, real)])
        return tuple([_tensor_view(b, s) for b, s in zip(blocks, specs)])
    finally:
        c._give(bufs)


def _backward(op, ent, grads, inputs, outputs, needs):
    fc = _cl._fc
    if fc:
        r = fc.call(op.client, op, ent, tuple(grads) + tuple(inputs) + tuple(outputs), 2,
                    tuple(needs), len(grads))
        if r is not NotImplemented:
            return r
    c = op.client
    h = c._handle()
    allin = tuple(grads) + tuple(inputs) + tuple(outputs)
    n_fwd = len(inputs)
    bufs = c._bufs(len(allin), n_fwd)
    keep = []
    devs = []
    try:
        ib = bufs[0]
        sig = [_pack_tensor(c, ib, i, t, keep, devs, op.name) for i, t in enumerate(allin)]
        off = len(grads)
        if devs:
            return _backward_cuda(c, h, op, ent, bufs, len(allin), sig, off, needs, devs, keep)
        ob_addr = bufs[3]
        blocks = []
        for i in range(n_fwd):
            dt, shape = sig[off + i]
            s = _OutSpec(dt, shape)
            b = c._alloc(dt, s.ndim, s.caddr)
            _memmove(ob_addr + i * _ASZ, _addressof(b), _ASZ)
            if not needs[i]:
                ctypes.c_int32.from_address(ob_addr + i * _ASZ + _cl._OFF_REQ).value = \
                    _lib.REQ_NULL
            blocks.append((b, s))
        _call(c, _lib_.mxop_backward, h, op._p, ent.addr, bufs[1], len(allin), ob_addr, n_fwd)
        return tuple([_tensor_view(b, s) if needs[i] else None
                      for i, (b, s) in enumerate(blocks)])
    finally:
        c._give(bufs)


# ---- autograd ----------------------------------------------------------------

class _Once(torch.autograd.Function):
    """The node under gradients computed with create_graph=True: it links
    them to the tensors they depend on (the call's inputs and output
    gradients), so that differentiating them again reaches it, and raises
    there.  An mxop backward runs in the worker and is once-differentiable;
    a second derivative through it would otherwise be silently zero (or
    "not used in the graph")."""

    @staticmethod
    def forward(ctx, name, n, *args):
        ctx.name = name
        ctx.n_args = len(args)
        return tuple(a.clone() for a in args[:n])

    @staticmethod
    def backward(ctx, *grads):
        raise NotSupported(-1023, "mxop op '%s' is once-differentiable: its backward runs "
                           "in the worker and cannot itself be differentiated (double "
                           "backward, e.g. a gradient penalty or gradgradcheck, is not "
                           "supported)" % ctx.name)


def _no_double_backward(name, res, deps):
    """`res` (gradients, some None) linked through _Once to `deps`."""
    idx = [i for i, r in enumerate(res) if r is not None]
    links = [d for d in deps if isinstance(d, _Tensor) and d.requires_grad]
    if not idx or not links:
        return res
    wrapped = _Once.apply(name, len(idx), *[res[i] for i in idx], *links)
    out = list(res)
    for i, w in zip(idx, wrapped):
        out[i] = w
    return tuple(out)


class _Fn(torch.autograd.Function):
    """One mxop call in the autograd graph: apply(op, entry, *inputs).

    Inputs the op writes in place (its mutated_inputs) are marked dirty and
    returned after the op's outputs (the caller drops them), as torch's own
    in-place ops do; their values before the call are what backward sees.
    A stateful op's backward is refused once its state has run another
    forward (the state then holds that call's values, not this one's)."""

    @staticmethod
    def forward(ctx, op, ent, *inputs):
        mut = op.mutated_inputs
        saved_in = inputs
        dirty = ()
        if mut:
            dirty = tuple(t for i, t in enumerate(inputs)
                          if mut >> i & 1 and isinstance(t, _Tensor))
            saved_in = tuple(t.clone() if (mut >> i & 1 and isinstance(t, _Tensor)) else t
                             for i, t in enumerate(inputs))
        outs = _forward(op, ent, inputs)
        ctx.op = op
        ctx.ent = ent
        ctx.n_in = len(inputs)
        ctx.n_out = len(outs)
        ctx.gen = op.__dict__.get("gen")  # a _StateOp's; an Op has none (no getattr miss)
        ctx.save_for_backward(*saved_in, *outs)
        nondiff = [o for o in outs if not (o.is_floating_point() or o.is_complex())]
        if nondiff:
            ctx.mark_non_differentiable(*nondiff)
        if dirty:
            ctx.mark_dirty(*dirty)
            # None, not zeros, for the extra outputs' gradients: a gradient
            # through them is refused, and zeros would look like one.
            ctx.set_materialize_grads(False)
            return outs + dirty
        return outs[0] if len(outs) == 1 else outs

    @staticmethod
    def backward(ctx, *grads):
        op = ctx.op
        n_out = ctx.n_out
        extra = grads[n_out:]
        grads = grads[:n_out]
        if extra and any(g is not None for g in extra):
            raise NotSupported(-1023, "op '%s' wrote an input in place; a gradient through "
                               "that input's new value is not supported" % op.name)
        if ctx.gen is not None and ctx.gen != op.gen:
            raise InvalidArgument(-1001, "backward of stateful op '%s' (state %#x): the state "
                                  "has run %d forward call(s) since this one, so its saved "
                                  "values belong to a later call; run backward before the "
                                  "next forward of the state" % (op.name, op.state.id,
                                                                 op.gen - ctx.gen))
        saved = ctx.saved_tensors
        inputs, outputs = saved[:ctx.n_in], saved[ctx.n_in:]
        if n_out == 1:
            if grads[0] is None:
                grads = (torch.zeros_like(outputs[0]),)
        else:
            grads = tuple([torch.zeros_like(o) if g is None else g
                           for g, o in zip(grads, outputs)])
        needs = ctx.needs_input_grad[2:]
        if True not in needs:
            return (None, None) + (None,) * ctx.n_in
        if _grad_enabled():
            # create_graph=True: the call itself is not recorded, and its
            # results are linked to what they depend on (once-differentiable).
            with torch.no_grad():
                res = _backward(op, ctx.ent, grads, inputs, outputs, needs)
            res = _no_double_backward(op.name, res, grads + tuple(inputs))
        else:
            res = _backward(op, ctx.ent, grads, inputs, outputs, needs)
        return (None, None) + res


# Under inference_mode() no graph is built even where enable_grad() turned
# grad mode back on (as for torch's own ops): its tensors cannot be saved.
_inference_mode = getattr(torch, "is_inference_mode_enabled", lambda: False)


def _needs_graph(tensors):
    if not torch.is_grad_enabled():
        return False
    for t in tensors:
        if isinstance(t, _Tensor) and t.requires_grad:
            return not _inference_mode()
    return False


# ---- keywords ---------------------------------------------------------------

def _declared(op):
    """The op's declared attributes by name ({name: (name, type, default,
    required, doc)}), or None when the library declares none (then every
    keyword goes to the op as an attribute string, as before declarations)."""
    d = getattr(op, "attrs", None)
    # An empty list is what an op without declarations reports.
    if not isinstance(d, (list, tuple)) or len(d) == 0:
        return None
    return {a[0]: a for a in d}


def _check_attrs(op, attrs):
    """Refuses keywords the op does not declare, naming the op and what it knows."""
    decl = _declared(op)
    if decl is None or not attrs:
        return
    for k in attrs:
        if k not in decl:
            raise InvalidAttribute(-1018, "op '%s' has no attribute '%s' (its attributes: %s; "
                                   "reserved keywords: out=, timeout=, seed=)"
                                   % (op.name, k, ", ".join(sorted(decl)) or "none"))


def _check_seed(seed):
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 < seed < 2**64:
        raise InvalidArgument(-1001, "seed= must be an integer in [1, 2**64), got %r "
                                     "(leave it out for the session's random sequence)"
                              % (seed,))


def _forward_out(op, ent, tensors, out):
    """A forward writing into the given tensors (out=), as torch's out= does:
    no autograd, shapes and dtypes must match what the op produces."""
    outs = (out,) if isinstance(out, _Tensor) else tuple(out)
    n_out = op.num_outputs
    if len(outs) != n_out:
        raise ArityMismatch(-1015, "op '%s' has %d output(s); out= gave %d"
                            % (op.name, n_out, len(outs)))
    if torch.is_grad_enabled() and (_needs_graph(tensors) or any(
            isinstance(o, _Tensor) and o.requires_grad for o in outs)):
        raise NotSupported(-1023, "op '%s': out= does not support autograd (an input or an "
                           "out tensor requires grad); call it under torch.no_grad() or "
                           "without out=" % op.name)
    c = op.client
    h = c._handle()
    n_in = len(tensors)
    bufs = c._bufs(n_in, n_out)
    keep = []
    try:
        ib = bufs[0]
        sig = tuple([_pack_tensor(c, ib, i, t, keep, None, op.name)
                     for i, t in enumerate(tensors)])
        specs = op._specs(ent, sig)
        for i, (o, s) in enumerate(zip(outs, specs)):
            if not isinstance(o, _Tensor) or o.device.type != "cpu" \
                    or o.layout is not _strided or not o.is_contiguous():
                raise InvalidArgument(-1001, "op '%s': out[%d] must be a contiguous CPU "
                                      "tensor" % (op.name, i))
            if _MX_OF_TORCH.get(o.dtype) != s.dtype:
                raise DtypeMismatch(-1017, "op '%s': out[%d] is %s; the op gives %s"
                                    % (op.name, i, o.dtype, _TORCH_OF.get(s.dtype)))
            if tuple(o.shape) != s.shape:
                raise ShapeMismatch(-1016, "op '%s': out[%d] has shape %s; the op gives %s"
                                    % (op.name, i, tuple(o.shape), s.shape))
            _pack_tensor(c, bufs[2], i, o, keep, None, op.name)
        _call(c, _lib_.mxop_forward, h, op._p, ent.addr, bufs[1], n_in, bufs[3], n_out)
    finally:
        c._give(bufs)
    with torch.no_grad():
        for o in outs:
            # The worker wrote the memory behind torch's back: bump the version
            # counter, so that a saved copy of `o` is known to be stale.  An
            # in-place op on an empty view bumps the counter it shares with
            # `o` without a pass over the data (o.mul_(1) doubled the cost of
            # a relu of 1 MiB), for every dtype.
            o.view(-1)[:0].fill_(0)
    return outs[0] if n_out == 1 else outs


# ---- processes: pickling and fork -------------------------------------------

_restored = {}  # socket path -> the client this process uses for restored ops


def _client_for(path):
    """A client of this process on the daemon at `path` (the one that made an
    op): an open one if there is one, else a new connection; without that
    socket, the default client."""
    from . import connect, default_client

    c = _restored.get(path)
    if c is not None and not c.closed:
        return c
    for c in list(_cl._clients):
        if c.path == path and not c.closed:
            _restored[path] = c
            return c
    if path and os.path.exists(path):
        c = connect(path)
    else:
        c = default_client()
    _restored[path] = c
    return c


def _find_op(client, library, name):
    try:
        return client.op(name)
    except UnknownOp:
        client.load(library)
        return client.op(name)


def _restore(library, name, attrs, path):
    return TorchOp(_find_op(_client_for(path), library, name), **attrs)


# ---- torch.ops.mxop.<op>: the dispatcher's view of an op ----------------------

class _Target:
    """What the dispatcher's kernels of one op name call (see _torch_library)."""

    def __init__(self, top):
        self.top = top

    def run(self, tensors, attrs, timeout, seed, grad):
        t = self.top
        if grad and _fwad._current_level >= 0:
            _no_tangents(t.op.name, tensors)
        plain = not attrs and timeout is None and seed is None
        if grad and plain and t.op.client._h and _needs_graph(tensors) and \
                not tensors[0].is_meta:
            # The graph-building call (all the C++ Autograd kernel hands over):
            # straight to the autograd Function, no detour through the C path.
            op = t.op
            r = _Fn.apply(op, t._ent, *tensors)
            if op.mutated_inputs:
                n = op.num_outputs
                return r[0] if n == 1 else tuple(r[:n])
            return r
        if plain:
            fc = _cl._fc
            if fc and t.op._fast:
                # The whole call in C when it needs no graph (else NotImplemented).
                op = t.op
                r = fc.call(op.client, op, t._ent, tensors, 3, None, 0)
                if r is not NotImplemented:
                    return r
        if t.op.client._h:
            op = t.op
        else:
            op = t._revive()
            _tl.rebind(op.name)
        ent = t._entry(attrs, timeout, seed)
        if grad and tensors and isinstance(tensors[0], _Tensor) and tensors[0].is_meta:
            # The Autograd kernel comes first for meta tensors too.
            outs = tuple(torch.empty(shape, dtype=dt, device="meta")
                         for dt, shape in self.meta(tensors, attrs))
            return outs[0] if len(outs) == 1 else outs
        if grad and _needs_graph(tensors):
            r = _Fn.apply(op, ent, *tensors)
            if op.mutated_inputs:
                n = op.num_outputs
                return r[0] if n == 1 else tuple(r[:n])
            return r
        outs = _forward(op, ent, tensors)
        return outs[0] if len(outs) == 1 else outs

    def binding(self):
        """(client, op pointer, call pointer, fast, has a backward, inputs,
        outputs) of the call without keywords, for the C++ kernels; None
        when closed."""
        op = self.top.op
        c = op.client
        if not c._h or c._close_pending:
            return None
        return (c, op._p, self.top._ent.addr, op._fast, op.has_backward, op.num_inputs,
                op.num_outputs)

    def raise_rc(self, rc):
        """Raises the error of a call the C++ kernel made (its exception class)."""
        _settle(self.top.op.client, rc)

    def meta(self, tensors, attrs):
        t = self.top
        op = t.op if t.op.client._h else t._revive()
        ent = t._entry(attrs)
        sig = tuple((dtype_code(x.dtype), tuple(x.shape)) for x in tensors)
        return [(_TORCH_OF[s.dtype], s.shape) for s in op._specs(ent, sig)]

    def fake(self, tensors, attrs):
        """The outputs as fake tensors (torch.library.register_fake): the
        op's shape and type inference, in the worker; see _torch_fake for
        symbolic sizes.  A data-dependent output (dynamic_outputs) gets an
        unbacked first dimension (the worker gives its real shape only
        when the op runs), the rest of its inferred shape."""
        t = self.top
        op = t.op if t.op.client._h else t._revive()
        for i, x in enumerate(tensors):
            e = _refuse(op.name, i, x)
            if e is not None:
                raise e
        ent = t._entry(attrs)
        dts, shapes = _torch_fake.output_shapes(op, ent, tensors, dtype_code, _TORCH_OF)
        dyn = op.dynamic_outputs
        outs = []
        dev = tensors[0].device if tensors else torch.device("cpu")
        for j, (dt, shape) in enumerate(zip(dts, shapes)):
            if j < 64 and dyn >> j & 1:
                if not shape:
                    raise NotSupported(-1023, "op '%s': data-dependent output %d has no "
                                       "dimensions" % (op.name, j))
                shape = (torch.library.get_ctx().new_dynamic_size(),) + tuple(shape[1:])
            outs.append(torch.empty(shape, dtype=dt, device=dev))
        return outs

    def backward(self, grads, inputs, outputs, attrs, timeout, seed):
        """mxop_bwd::<op>'s kernel: every floating-point input's gradient
        (zeros for the others: a Tensor[] has no None)."""
        t = self.top
        op = t.op if t.op.client._h else t._revive()
        ent = t._entry(attrs, timeout, seed)
        needs = tuple(x.is_floating_point() for x in inputs)
        res = _backward(op, ent, tuple(grads), tuple(inputs), tuple(outputs), needs)
        return [r if r is not None else torch.zeros_like(x) for r, x in zip(res, inputs)]

    def no_tangents(self, tensors):
        _no_tangents(self.top.op.name, tensors)

    def once(self, res, deps):
        """Gradients computed with create_graph=True, linked to what they
        depend on through a node that raises when differentiated."""
        return list(_no_double_backward(self.top.op.name, tuple(res), tuple(deps)))


def _register(op):
    """Makes `op` torch.ops.mxop.<name> (stateful ops stay mxop.torch only:
    a state is an object, not an argument a schema can carry)."""
    if op.stateful:
        return False
    e = _tl._ops.get(op.name)
    if e is not None:
        if e.target.top.op is op:
            return True
        same = (e.variadic == (op.num_inputs < 0) and e.n_out == op.num_outputs)
        if not same:
            return False  # another library's op of that name keeps it
    decl = getattr(op, "attrs", None)
    if not isinstance(decl, (list, tuple)) or len(decl) == 0:
        decl = None
    try:
        return _tl.register(op.name, op.num_inputs, op.num_outputs, decl,
                            _Target(TorchOp(op, _register=False)), op.mutated_inputs)
    except RuntimeError:  # a name or declaration the schema language cannot take
        return False


_tracing_state = torch._C._get_tracing_state  # not None under torch.jit.trace


_Proxy = torch.fx.Proxy
# True while torch.compile (dynamo) or torch.export traces; torch 1.13 has neither.
_compiling = getattr(getattr(torch, "compiler", None), "is_compiling", None) or (lambda: False)
_grad_enabled = torch.is_grad_enabled


def _mode(tensors):
    """How to run a call: 2 if torch.fx is tracing it (Proxy inputs), 1 if it
    goes into the autograd graph, else 0 (one pass over the inputs)."""
    g = _grad_enabled()
    m = 0
    for t in tensors:
        if type(t) is not _Tensor:
            if isinstance(t, _Proxy):
                return 2
            if not isinstance(t, _Tensor):
                continue
        if g and t.requires_grad:
            m = 1
    if m == 1 and _inference_mode():
        return 0
    return m


def _no_tangents(name, tensors):
    """Refuses inputs carrying a forward-mode AD tangent (dual tensors): an
    mxop op declares no jvp, and the output would otherwise have no tangent,
    silently.  A cheap test first: no dual level is open in most programs."""
    if _fwad._current_level < 0:
        return
    for i, t in enumerate(tensors):
        if isinstance(t, _Tensor) and _fwad.unpack_dual(t).tangent is not None:
            raise NotSupported(-1023, "op '%s': input %d carries a forward-mode AD tangent "
                               "(torch.autograd.forward_ad), and mxop ops have no forward-mode "
                               "derivative (jvp); use reverse mode (backward) for this op"
                               % (name, i))


class TorchOp:
    """An mxop op on tensors, with autograd through the op's backward.

    Keyword arguments at construction are default attributes; at a call
    they add to (or override) them.  Reserved keywords at a call:
    timeout= (seconds: this call's deadline), seed= (the call's random
    seed, an integer >= 1), out= (tensor(s) the outputs are written into;
    no autograd).  When the op declares its attributes, any other keyword
    must be one of them (InvalidAttribute otherwise).  Without grad
    (torch.no_grad(), or no input requires grad) a call skips the autograd
    machinery.

    A TorchOp pickles as (library, op, attributes, daemon socket) and is
    found again in the unpickling process (deepcopy, torch.save, spawn);
    in a forked child it reconnects to the same daemon on first use."""

    def __init__(self, op, _register=True, **attrs):
        if not isinstance(op, Op):
            raise InvalidArgument(-1001, "TorchOp needs an mxop.Op, got %r" % (op,))
        for k in ("out", "timeout", "seed"):
            if k in attrs:
                raise InvalidArgument(-1001, "%s= is a keyword of a call, not an attribute "
                                             "of op '%s'" % (k, op.name))
        _check_attrs(op, attrs)
        self.op = op
        self.attrs = dict(attrs)
        self._ent = op._entry(self.attrs)
        self.__name__ = op.name
        self.registered = _register and globals()["_register"](op)
        _interrupt.arm()

    def _revive(self):
        """The op again after a fork: this process's own session on the same daemon."""
        c = self.op.client
        if not getattr(c, "_forked", False):
            c._handle()  # raises: the client is closed
        self.op = _find_op(_client_for(c.path), self.op.library, self.op.name)
        return self.op

    def _entry(self, attrs, timeout=None, seed=None):
        if not attrs and timeout is None and seed is None:
            return self._ent
        if attrs:
            _check_attrs(self.op, attrs)
        if seed is not None:
            _check_seed(seed)
        return self.op._entry({**self.attrs, **attrs}, 0, timeout, seed)

    def __call__(self, *tensors, out=None, timeout=None, seed=None, **attrs):
        op = self.op
        if _fwad._current_level >= 0:
            _no_tangents(op.name, tensors)
        if _compiling() and self.registered and out is None:
            # torch.compile / torch.export trace the dispatcher op (its fake
            # kernel, its autograd of dispatcher ops), not this Python code.
            args, kw = _tl.call_args(op.name, tensors, {**self.attrs, **attrs}, timeout, seed)
            return _tl.op(op.name)(*args, **kw)
        if out is None and timeout is None and seed is None and not attrs:
            fc = _cl._fc
            if fc and op._fast:
                # The whole call in C when no autograd graph or tracing is
                # involved (NotImplemented otherwise: the code below).
                r = fc.call(op.client, op, self._ent, tensors, 3, None, 0)
                if r is not NotImplemented:
                    return r
        if not op.client._h:
            op = self._revive()
        ent = self._entry(attrs, timeout, seed) if (attrs or timeout is not None
                                                    or seed is not None) else self._ent
        if out is not None:
            return _forward_out(op, ent, tensors, out)
        mode = _mode(tensors)
        if self.registered and (mode == 2 or _tracing_state() is not None):
            # Recorded as a call of torch.ops.mxop.<op>, not as its result.
            args, kw = _tl.call_args(op.name, tensors, {**self.attrs, **attrs}, timeout, seed)
            return _tl.op(op.name)(*args, **kw)
        if mode:
            r = _Fn.apply(op, ent, *tensors)
            if op.mutated_inputs:
                n = op.num_outputs
                return r[0] if n == 1 else r[:n]
            return r
        outs = _forward(op, ent, tensors)
        return outs[0] if len(outs) == 1 else outs

    def bind(self, **attrs):
        """A TorchOp with these attributes added."""
        return TorchOp(self.op, **{**self.attrs, **attrs})

    def create_state(self, *tensors, **attrs):
        """A TorchState of this (stateful) op for inputs like these."""
        _check_attrs(self.op, attrs)
        return TorchState(self.op.create_state(*[_spec_of(t) for t in tensors],
                                               **{**self.attrs, **attrs}))

    def __reduce__(self):
        return (_restore, (self.op.library, self.op.name, self.attrs, self.op.client.path))

    def __deepcopy__(self, memo):
        # Same process: the copy shares the op (ops hold no per-call state).
        return TorchOp(self.op, **self.attrs)

    def __repr__(self):
        return "<mxop.torch.TorchOp %s %r>" % (self.op.name, self.attrs)


class _StateOp:
    """What _Fn needs of an op, for a state: its client, pointer and outputs,
    and `gen`, the number of forward calls the state has run."""

    def __init__(self, state):
        self.state = state
        op = state.op
        self.client = op.client
        self._p = op._p
        self.num_outputs = op.num_outputs
        self.mutated_inputs = op.mutated_inputs
        self.name = op.name
        self._specs = op._specs
        self._real_specs = op._real_specs
        self.dynamic_outputs = op.dynamic_outputs
        self._fast = op._fast
        self.gen = 0


class TorchState:
    """A stateful op instance on tensors (autograd through state_backward).

    The backward of a call must run before the state's next forward: the
    state then holds that later call's values, so a late backward raises
    InvalidArgument instead of computing with them."""

    def __init__(self, state):
        self.state = state
        self._op = _StateOp(state)

    def __call__(self, *tensors):
        self.state._alive()
        ent = self.state._ent
        sop = self._op
        sop.gen += 1
        if _needs_graph(tensors):
            r = _Fn.apply(sop, ent, *tensors)
            if sop.mutated_inputs:
                n = sop.num_outputs
                return r[0] if n == 1 else r[:n]
            return r
        outs = _forward(sop, ent, tensors)
        return outs[0] if len(outs) == 1 else outs

    def recreate(self):
        self.state.recreate()

    def close(self):
        self.state.close()

    def __reduce__(self):
        raise NotSupported(-1023, "a TorchState of op '%s' lives in one worker and cannot be "
                           "pickled or copied; create a new state where it is needed"
                           % self.state.op.name)

    @property
    def id(self):
        return self.state.id


def _spec_of(t):
    """A (shape, dtype) pair for Op.create_state."""
    if isinstance(t, _Tensor):
        return tuple(t.shape), dtype_code(t.dtype)
    return t


class Ops:
    """A library's ops as TorchOps (attributes and a dict)."""

    def __init__(self, name, ops):
        self.name = name
        self.ops = ops
        self.__dict__.update({k: v for k, v in ops.items() if k.isidentifier()})

    def __getitem__(self, name):
        return self.ops[name]

    def __repr__(self):
        return "<mxop.torch.Ops %r: %s>" % (self.name, ", ".join(self.ops))


def load(client, library):
    """Loads `library` into `client`'s session; returns its ops as TorchOps."""
    if client is None:
        from . import default_client

        client = default_client()
    lib = client.load(library)
    return Ops(library, {n: TorchOp(o) for n, o in lib.ops.items()})


def ops(client=None):
    """Every op loaded in `client`'s session, as TorchOps."""
    if client is None:
        from . import default_client

        client = default_client()
    return Ops("*", {n: TorchOp(o) for n, o in client.ops().items()})


def op(name, client=None, **attrs):
    """The loaded op `name` as a TorchOp."""
    if client is None:
        from . import default_client

        client = default_client()
    return TorchOp(client.op(name), **attrs)


def wrap(op_, **attrs):
    """An mxop.Op as a TorchOp."""
    return TorchOp(op_, **attrs)


def empty(shape, dtype=torch.float32, client=None):
    """An uninitialised tensor in mxop shared memory (zero-copy as an op input)."""
    if client is None:
        from . import default_client

        client = default_client()
    if isinstance(shape, int):
        shape = (shape,)
    spec = _OutSpec(dtype_code(dtype), tuple(shape))
    return _tensor_view(client._alloc(spec.dtype, spec.ndim, spec.caddr), spec)


def zeros(shape, dtype=torch.float32, client=None):
    return empty(shape, dtype, client).zero_()


def to_shared(t, client=None):
    """`t` copied once into mxop shared memory (a tensor that then passes
    every op of `client` without a copy)."""
    out = empty(tuple(t.shape), t.dtype, client)
    with torch.no_grad():
        out.copy_(t)
    return out.requires_grad_(t.requires_grad)


# ---- modules ----------------------------------------------------------------

class OpModule(torch.nn.Module):
    """Any TorchOp as a module: forward(*inputs) = op(*inputs).

    torch.jit.script(module) scripts it as a module whose forward has the
    op's inputs (x0, x1, ...) and calls torch.ops.mxop.<op> with the
    module's attributes (see _scriptable)."""

    def __init__(self, op_, **attrs):
        super().__init__()
        self.op = op_ if isinstance(op_, TorchOp) else TorchOp(op_, **attrs)
        if attrs and isinstance(op_, TorchOp):
            self.op = op_.bind(**attrs)

    def forward(self, *inputs):
        return self.op(*inputs)

    def __prepare_scriptable__(self):
        # torch.jit.script cannot compile forward(*inputs): it scripts this
        # module's fixed-arity twin instead.
        return _scriptable(self.op)

    def extra_repr(self):
        return "%s, %r" % (self.op.op.name, self.op.attrs)


_SCRIPTED = {}  # (op name, inputs, outputs, attributes) -> the twin's class


def _scriptable(top):
    """A module TorchScript can compile that calls TorchOp `top` as
    torch.ops.mxop.<op>(x0, ..., attributes): its class is written for
    the op's arity and attributes, its source kept in linecache (where
    TorchScript reads it; nothing is written to disk)."""
    import linecache

    op = top.op
    if not top.registered:
        raise NotSupported(-1023, "op '%s' cannot be scripted: it is not torch.ops.mxop.%s "
                           "(a stateful op, or a name or attribute the schema language cannot "
                           "take)" % (op.name, op.name))
    if op.num_inputs < 0:
        raise NotSupported(-1023, "op '%s' takes a variable number of inputs; script a "
                           "function calling torch.ops.mxop.%s(list_of_tensors) instead"
                           % (op.name, op.name))
    args, kw = _tl.call_args(op.name, ["x%d" % i for i in range(op.num_inputs)],
                             dict(top.attrs), None, None)
    key = (op.name, op.num_inputs, op.num_outputs, tuple(sorted(kw.items())))
    cls = _SCRIPTED.get(key)
    if cls is None:
        params = "".join(", %s: torch.Tensor" % a for a in args)
        call = ", ".join(list(args) + ["%s=%r" % kv for kv in kw.items()])
        ret = "torch.Tensor" if op.num_outputs == 1 else \
            "Tuple[%s]" % ", ".join(["torch.Tensor"] * op.num_outputs)
        name = "_MxopScripted%d" % len(_SCRIPTED)
        src = ("class %s(torch.nn.Module):\n"
               "    def forward(self%s) -> %s:\n"
               "        return torch.ops.mxop.%s(%s)\n" % (name, params, ret, op.name, call))
        fname = "<mxop.torch scripted %s #%d>" % (op.name, len(_SCRIPTED))
        linecache.cache[fname] = (len(src), None, src.splitlines(True), fname)
        from typing import Tuple
        ns = {"torch": torch, "Tuple": Tuple, "__name__": __name__}
        exec(compile(src, fname, "exec"), ns)
        cls = _SCRIPTED[key] = ns[name]
    return cls()


class Linear(torch.nn.Module):
    """nn.Linear whose product runs in mxop's "gemm" op: y = x W^T + b.

    `gemm` is the TorchOp (or mxop.Op) of gemm.so; the weight is [out, in]
    as in nn.Linear, so the op is called with transpose_b.  The bias add is
    PyTorch's own."""

    def __init__(self, in_features, out_features, gemm, bias=True, dtype=torch.float32):
        super().__init__()
        g = gemm.op if isinstance(gemm, TorchOp) else gemm
        self.gemm = TorchOp(g, transpose_b=True)
        self.in_features = in_features
        self.out_features = out_features
        ref = torch.nn.Linear(in_features, out_features, bias=bias, dtype=dtype)
        self.weight = torch.nn.Parameter(ref.weight.detach().clone())
        self.bias = torch.nn.Parameter(ref.bias.detach().clone()) if bias else None

    def forward(self, x):
        y = self.gemm(x, self.weight)
        return y + self.bias if self.bias is not None else y

    def __prepare_scriptable__(self):
        # torch.jit.script cannot compile a call of a TorchOp: it scripts a
        # twin that calls torch.ops.mxop.gemm on the same parameters.
        g = self.gemm
        if g.op.name != "gemm" or not g.registered or g.attrs != {"transpose_b": True}:
            raise NotSupported(-1023, "mxop.torch.Linear over op '%s' %r cannot be scripted: "
                               "its twin calls torch.ops.mxop.gemm(x, w, transpose_b=True)"
                               % (g.op.name, g.attrs))
        return _ScriptableLinear(self)

    def extra_repr(self):
        return "in_features=%d, out_features=%d, bias=%s" % (
            self.in_features, self.out_features, self.bias is not None)


class _ScriptableLinear(torch.nn.Module):
    """Linear's twin for torch.jit.script (the same parameters)."""

    def __init__(self, lin):
        super().__init__()
        self.weight = lin.weight
        self.bias = lin.bias

    def forward(self, x):
        y = torch.ops.mxop.gemm(x, self.weight, transpose_b=True)
        b = self.bias
        if b is not None:
            y = y + b
        return y
