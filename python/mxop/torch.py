"""mxop ops as PyTorch functions with autograd.

    import mxop, mxop.torch
    c = mxop.connect()
    gemm = mxop.torch.load(c, "gemm.so").gemm       # a TorchOp
    y = gemm(a, b, transpose_b=True)                # tensors in, tensors out
    y.sum().backward()                              # through the op's backward

Each call is a torch.autograd.Function: forward runs the op, backward runs
its backward with in = [output gradients, inputs, outputs].  TorchOps work
inside nn.Modules (see Linear and OpModule below).

The parts: dtypes (_torch_dtypes), tensor packing and the call
(_torch_pack, _torch_calls), shared storages as regions (_torch_storage),
CUDA regions (_torch_cuda), autograd (_torch_autograd); this module is the
API, the pickling and fork support, and torch.ops / TorchScript glue.

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

import os

import torch
from torch.autograd import forward_ad as _fwad

from . import _fast
from . import _interrupt
from . import _torch_fake
from . import _torch_library as _tl
from ._lib import lib as _lib_
from .client import Library, Op, live_clients
from ._records import OutSpec
from ._torch_autograd import Fn, inference_mode, needs_graph, no_double_backward
from ._torch_calls import call, inflight, settle
from ._torch_cuda import cuda_regions, release_cuda_regions  # noqa: F401 - the API
from ._torch_dtypes import CODE_OF_TORCH, TORCH_OF, dtype_code
from ._torch_pack import backward, forward, pack_tensor, refuse, tensor_view
from ._torch_storage import region_of as storage_region_of
from ._torch_storage import shared_regions  # noqa: F401 - the API
from .errors import (InvalidArgument, NotSupported, InvalidAttribute, ArityMismatch,
                     ShapeMismatch, DtypeMismatch, UnknownOp)

_Tensor = torch.Tensor
_strided = torch.strided

# What the C call path needs of torch and of the torch layer (the dtype dict
# itself: it is filled when libmxop is loaded, which may be later; the shared
# storages' registry, which alone knows where a storage's region lies).
_fast.set_torch(_Tensor, torch.from_numpy, _strided, CODE_OF_TORCH, settle, inflight,
                torch.is_grad_enabled, torch._C._get_tracing_state, storage_region_of)


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
            raise InvalidAttribute("op '%s' has no attribute '%s' (its attributes: %s; "
                                   "reserved keywords: out=, timeout=, seed=)"
                                   % (op.name, k, ", ".join(sorted(decl)) or "none"))


def _check_seed(seed):
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 < seed < 2**64:
        raise InvalidArgument("seed= must be an integer in [1, 2**64), got %r "
                                     "(leave it out for the session's random sequence)"
                              % (seed,))


def _forward_out(op, ent, tensors, out):
    """A forward writing into the given tensors (out=), as torch's out= does:
    no autograd, shapes and dtypes must match what the op produces."""
    outs = (out,) if isinstance(out, _Tensor) else tuple(out)
    n_out = op.num_outputs
    if len(outs) != n_out:
        raise ArityMismatch("op '%s' has %d output(s); out= gave %d"
                            % (op.name, n_out, len(outs)))
    if torch.is_grad_enabled() and (needs_graph(tensors) or any(
            isinstance(o, _Tensor) and o.requires_grad for o in outs)):
        raise NotSupported("op '%s': out= does not support autograd (an input or an "
                           "out tensor requires grad); call it under torch.no_grad() or "
                           "without out=" % op.name)
    c = op.client
    h = c.check_handle()
    n_in = len(tensors)
    bufs = c.records(n_in, n_out)
    keep = []
    try:
        ib = bufs[0]
        sig = tuple([pack_tensor(c, ib, i, t, keep, None, op.name)
                     for i, t in enumerate(tensors)])
        specs = op.specs(ent, sig)
        for i, (o, s) in enumerate(zip(outs, specs)):
            if not isinstance(o, _Tensor) or o.device.type != "cpu" \
                    or o.layout is not _strided or not o.is_contiguous():
                raise InvalidArgument("op '%s': out[%d] must be a contiguous CPU "
                                      "tensor" % (op.name, i))
            if CODE_OF_TORCH.get(o.dtype) != s.dtype:
                raise DtypeMismatch("op '%s': out[%d] is %s; the op gives %s"
                                    % (op.name, i, o.dtype, TORCH_OF.get(s.dtype)))
            if tuple(o.shape) != s.shape:
                raise ShapeMismatch("op '%s': out[%d] has shape %s; the op gives %s"
                                    % (op.name, i, tuple(o.shape), s.shape))
            pack_tensor(c, bufs[2], i, o, keep, None, op.name)
        call(c, _lib_.mxop_forward, h, op.pointer, ent.addr, bufs[1], n_in, bufs[3], n_out)
    finally:
        c.give_records(bufs)
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
    for c in live_clients():
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
        if grad and plain and t.op.client.handle and needs_graph(tensors) and \
                not tensors[0].is_meta:
            # The graph-building call (all the C++ Autograd kernel hands over):
            # straight to the autograd Function, no detour through the C path.
            op = t.op
            r = Fn.apply(op, t._ent, *tensors)
            if op.mutated_inputs:
                n = op.num_outputs
                return r[0] if n == 1 else tuple(r[:n])
            return r
        if plain:
            fc = _fast.fc
            if fc and t.op.fast:
                # The whole call in C when it needs no graph (else NotImplemented).
                op = t.op
                r = fc.call(op.client, op, t._ent, tensors, 3, None, 0)
                if r is not NotImplemented:
                    return r
        if t.op.client.handle:
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
        if grad and needs_graph(tensors):
            r = Fn.apply(op, ent, *tensors)
            if op.mutated_inputs:
                n = op.num_outputs
                return r[0] if n == 1 else tuple(r[:n])
            return r
        outs = forward(op, ent, tensors)
        return outs[0] if len(outs) == 1 else outs

    def binding(self):
        """(client, op pointer, call pointer, fast, has a backward, inputs,
        outputs) of the call without keywords, for the C++ kernels; None
        when closed."""
        op = self.top.op
        c = op.client
        if c.closed:
            return None
        return (c, op.pointer, self.top._ent.addr, op.fast, op.has_backward, op.num_inputs,
                op.num_outputs)

    def raise_rc(self, rc):
        """Raises the error of a call the C++ kernel made (its exception class)."""
        settle(self.top.op.client, rc)

    def meta(self, tensors, attrs):
        t = self.top
        op = t.op if t.op.client.handle else t._revive()
        ent = t._entry(attrs)
        sig = tuple((dtype_code(x.dtype), tuple(x.shape)) for x in tensors)
        return [(TORCH_OF[s.dtype], s.shape) for s in op.specs(ent, sig)]

    def fake(self, tensors, attrs):
        """The outputs as fake tensors (torch.library.register_fake): the
        op's shape and type inference, in the worker; see _torch_fake for
        symbolic sizes.  A data-dependent output (dynamic_outputs) gets an
        unbacked first dimension (the worker gives its real shape only
        when the op runs), the rest of its inferred shape."""
        t = self.top
        op = t.op if t.op.client.handle else t._revive()
        for i, x in enumerate(tensors):
            e = refuse(op.name, i, x)
            if e is not None:
                raise e
        ent = t._entry(attrs)
        dts, shapes = _torch_fake.output_shapes(op, ent, tensors, dtype_code, TORCH_OF)
        dyn = op.dynamic_outputs
        outs = []
        dev = tensors[0].device if tensors else torch.device("cpu")
        for j, (dt, shape) in enumerate(zip(dts, shapes)):
            if j < 64 and dyn >> j & 1:
                if not shape:
                    raise NotSupported("op '%s': data-dependent output %d has no "
                                       "dimensions" % (op.name, j))
                shape = (torch.library.get_ctx().new_dynamic_size(),) + tuple(shape[1:])
            outs.append(torch.empty(shape, dtype=dt, device=dev))
        return outs

    def backward(self, grads, inputs, outputs, attrs, timeout, seed):
        """mxop_bwd::<op>'s kernel: every floating-point input's gradient
        (zeros for the others: a Tensor[] has no None)."""
        t = self.top
        op = t.op if t.op.client.handle else t._revive()
        ent = t._entry(attrs, timeout, seed)
        needs = tuple(x.is_floating_point() for x in inputs)
        res = backward(op, ent, tuple(grads), tuple(inputs), tuple(outputs), needs)
        return [r if r is not None else torch.zeros_like(x) for r, x in zip(res, inputs)]

    def no_tangents(self, tensors):
        _no_tangents(self.top.op.name, tensors)

    def once(self, res, deps):
        """Gradients computed with create_graph=True, linked to what they
        depend on through a node that raises when differentiated."""
        return list(no_double_backward(self.top.op.name, tuple(res), tuple(deps)))


def _register(op):
    """Makes `op` torch.ops.mxop.<name> (stateful ops stay mxop.torch only:
    a state is an object, not an argument a schema can carry)."""
    if op.stateful:
        return False
    e = _tl.entry(op.name)
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
    if m == 1 and inference_mode():
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
            raise NotSupported("op '%s': input %d carries a forward-mode AD tangent "
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
            raise InvalidArgument("TorchOp needs an mxop.Op, got %r" % (op,))
        for k in ("out", "timeout", "seed"):
            if k in attrs:
                raise InvalidArgument("%s= is a keyword of a call, not an attribute "
                                             "of op '%s'" % (k, op.name))
        _check_attrs(op, attrs)
        self.op = op
        self.attrs = dict(attrs)
        self._ent = op.entry(self.attrs)
        self.__name__ = op.name
        self.registered = _register and globals()["_register"](op)
        _interrupt.arm()

    def _revive(self):
        """The op again after a fork: this process's own session on the same daemon."""
        c = self.op.client
        if not c.forked:
            c.check_handle()  # raises: the client is closed
        self.op = _find_op(_client_for(c.path), self.op.library, self.op.name)
        return self.op

    def _entry(self, attrs, timeout=None, seed=None):
        if not attrs and timeout is None and seed is None:
            return self._ent
        if attrs:
            _check_attrs(self.op, attrs)
        if seed is not None:
            _check_seed(seed)
        return self.op.entry({**self.attrs, **attrs}, 0, timeout, seed)

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
            fc = _fast.fc
            if fc and op.fast:
                # The whole call in C when no autograd graph or tracing is
                # involved (NotImplemented otherwise: the code below).
                r = fc.call(op.client, op, self._ent, tensors, 3, None, 0)
                if r is not NotImplemented:
                    return r
        if not op.client.handle:
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
            r = Fn.apply(op, ent, *tensors)
            if op.mutated_inputs:
                n = op.num_outputs
                return r[0] if n == 1 else r[:n]
            return r
        outs = forward(op, ent, tensors)
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
    """What Fn needs of an op, for a state: its client, pointer and outputs,
    and `gen`, the number of forward calls the state has run."""

    def __init__(self, state):
        self.state = state
        op = state.op
        self.client = op.client
        self.pointer = op.pointer
        self.num_outputs = op.num_outputs
        self.mutated_inputs = op.mutated_inputs
        self.name = op.name
        self.specs = op.specs
        self.real_specs = op.real_specs
        self.dynamic_outputs = op.dynamic_outputs
        self.fast = op.fast
        # _fastcall.c reads an op's pointer and inference by these names.
        self._p = self.pointer
        self._specs = self.specs
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
        self.state.check_open()
        ent = self.state.entry
        sop = self._op
        sop.gen += 1
        if needs_graph(tensors):
            r = Fn.apply(sop, ent, *tensors)
            if sop.mutated_inputs:
                n = sop.num_outputs
                return r[0] if n == 1 else r[:n]
            return r
        outs = forward(sop, ent, tensors)
        return outs[0] if len(outs) == 1 else outs

    def recreate(self):
        self.state.recreate()

    def close(self):
        self.state.close()

    def __reduce__(self):
        raise NotSupported("a TorchState of op '%s' lives in one worker and cannot be "
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


class Ops(Library):
    """A library's ops as TorchOps (attributes and a dict)."""

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
    spec = OutSpec(dtype_code(dtype), tuple(shape))
    return tensor_view(client.alloc(spec.dtype, spec.ndim, spec.caddr), spec)


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
        raise NotSupported("op '%s' cannot be scripted: it is not torch.ops.mxop.%s "
                           "(a stateful op, or a name or attribute the schema language cannot "
                           "take)" % (op.name, op.name))
    if op.num_inputs < 0:
        raise NotSupported("op '%s' takes a variable number of inputs; script a "
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
            raise NotSupported("mxop.torch.Linear over op '%s' %r cannot be scripted: "
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

