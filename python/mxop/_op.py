"""Ops of a loaded library and their calls on NumPy arrays: Op, BoundOp,
State (a stateful op's instance) and Library.

Per-call cost: each Op keeps its mxop_call_t and attribute arrays per
attribute set (a CallEntry), and its inferred output shapes per input
signature, so a call with known shapes costs Python only the packing of the
tensor records (one struct.pack_into each) and one ctypes call.  When the C
call path (_fastcall.c) is there, a plain call is made whole in C.

What an Op needs of its client is the client's public face: check_handle(),
error(rc), check(rc), records()/give_records(), pack_numpy(), alloc(),
view(), region_of() and empty().
"""

import ctypes
import weakref

import numpy as np

from . import _fast, _lib
from ._attrs import attr_value, attr_value_mxnet, op_attrs
from ._dtypes import CODE_OF_NUMPY as _MX_OF_NP, NAMES as _DTYPE_NAMES, spec_of as _spec_of
from ._lib import lib, MxopShape
from ._memory import Block, view
from ._records import (ARRAY_SIZE as _ASZ, CallEntry, MAX_DIMS, OutSpec,
                       ZPAD as _ZPAD, milliseconds, pack_array as _pack_array, real_specs)
from .errors import ArityMismatch, Disconnected, InvalidArgument, StateLost, UnknownState

_addressof = ctypes.addressof
_ndarray = np.ndarray


class Library:
    """The ops of one loaded library, as attributes and as .ops (a dict)."""

    def __init__(self, name, ops):
        self.name = name
        self.ops = ops
        self.__dict__.update({k: v for k, v in ops.items() if k.isidentifier()})

    def __getitem__(self, name):
        return self.ops[name]

    def __iter__(self):
        return iter(self.ops.values())

    def __repr__(self):
        return "<mxop.Library %r: %s>" % (self.name, ", ".join(self.ops))


class Op:
    """An op of a loaded library, callable on NumPy arrays.

        y = op(x, alpha=2.0)               # forward; outputs inferred and allocated
        dx = op.backward([dy], [x], [y])   # gradients of the inputs
        st = op.create_state(x)            # stateful ops: a State

    Keyword arguments are the op's attributes (bools become "1"/"0").
    Reserved keywords: out= (output arrays), timeout= (seconds), seed=,
    attrs= (a dict, for attribute names that clash with these).
    """

    def __init__(self, client, handle, info):
        self.client = client
        self._p = handle
        self.name = info.name.decode()
        self.description = (info.description or b"").decode()
        self.library = (info.library or b"").decode()
        self.num_inputs = info.num_inputs
        self.min_inputs = info.min_inputs
        self.num_outputs = info.num_outputs
        self.mutated_inputs = info.mutated_inputs
        self.has_backward = bool(info.has_backward)
        self.stateful = bool(info.stateful)
        # Declared attributes (empty: the op declares none and takes any).
        self.attrs = op_attrs(handle)
        self.flags = lib.mxop_op_flags(handle)
        self.strided = bool(self.flags & _lib.OP_STRIDED)
        # Outputs whose shape is known only after forward (bit j: output j).
        self.dynamic_outputs = lib.mxop_op_dynamic_outputs(handle)
        self._calls = {}
        self._infer = {}  # (attribute pairs, input signature) -> OutSpecs
        # Calls the C path can make whole (no out=): the others, in-place,
        # strided and dynamic-shape ops, need the checks of the ctypes path.
        self._fast = not (self.mutated_inputs or self.strided or self.dynamic_outputs)

    @property
    def pointer(self):
        """The op's mxop_op_t pointer (an integer) for calls made elsewhere."""
        return self._p

    @property
    def fast(self):
        """True when the C call path may make a plain call of this op whole."""
        return self._fast

    def __repr__(self):
        return "<mxop.Op %s (%s): %s in, %d out%s%s>" % (
            self.name, self.library,
            self.num_inputs if self.num_inputs >= 0 else ">=%d" % self.min_inputs,
            self.num_outputs, ", backward" if self.has_backward else "",
            ", stateful" if self.stateful else "")

    # ---- attributes and prebuilt calls --------------------------------------

    def entry(self, kw, state=0, timeout=None, seed=None):
        """The prebuilt call for attributes `kw` (a dict)."""
        pairs = None
        if self.flags & _lib.OP_MXNET:
            # 1, 1.0 and True are one dict key but three strings for MXNet.
            key = pairs = tuple((str(k), attr_value_mxnet(v)) for k, v in kw.items())
        else:
            key = tuple(kw.items()) if kw else ()
        if timeout is None and seed is None and not state:
            try:
                ent = self._calls.get(key)
            except TypeError:
                # A list attribute given as a Python list: cached as a tuple.
                key = tuple((k, tuple(v) if isinstance(v, list) else v) for k, v in kw.items())
                ent = self._calls.get(key)
            if ent is not None:
                return ent
        if pairs is None:
            pairs = tuple((str(k), attr_value(v)) for k, v in kw.items())
        tms = milliseconds(timeout, "timeout") if timeout is not None else 0
        ent = CallEntry(pairs, pairs, state=state, timeout_ms=tms, seed=int(seed or 0))
        if timeout is None and seed is None and not state:
            if len(self._calls) > 1024:
                self._calls.clear()
            self._calls[key] = ent
        return ent

    def bind(self, **attrs):
        """The op with attributes fixed: a callable that skips attribute handling."""
        return BoundOp(self, self.entry(attrs))

    # ---- inference -------------------------------------------------------

    def specs(self, ent, sig):
        """The outputs' OutSpecs for input signature `sig` ((dtype, shape), ...)."""
        k = (ent.pairs, sig)
        specs = self._infer.get(k)
        if specs is not None:
            return specs
        n_in = len(sig)
        n_out = self.num_outputs
        in_dt = (ctypes.c_int32 * max(n_in, 1))(*[d for d, _ in sig])
        in_sh = (MxopShape * max(n_in, 1))()
        for i, (_, shape) in enumerate(sig):
            in_sh[i].ndim = len(shape)
            for j, d in enumerate(shape):
                in_sh[i].dims[j] = d
        out_dt = (ctypes.c_int32 * max(n_out, 1))()
        out_sh = (MxopShape * max(n_out, 1))()
        rc = lib.mxop_infer(self.client.check_handle(), self._p, ent.attrs_addr, n_in,
                            _addressof(in_dt), _addressof(in_sh), n_out,
                            _addressof(out_dt), _addressof(out_sh))
        if rc < 0:
            raise self.client.error(rc)
        specs = tuple(OutSpec(out_dt[i], tuple(out_sh[i].dims[:out_sh[i].ndim]))
                      for i in range(n_out))
        if len(self._infer) > 4096:
            self._infer.clear()
        self._infer[k] = specs
        return specs

    def infer(self, *inputs, attrs=None, **kw):
        """Output (dtype name, shape) pairs for inputs given as arrays or
        (shape, dtype) pairs, without running the op."""
        if attrs:
            kw = {**attrs, **kw}
        sig = tuple(_spec_of(x) for x in inputs)
        return [(_DTYPE_NAMES[s.dtype], s.shape) for s in self.specs(self.entry(kw), sig)]

    # ---- calls -------------------------------------------------------------

    def __call__(self, *inputs, out=None, timeout=None, seed=None, attrs=None, **kw):
        if attrs:
            kw = {**attrs, **kw}
        ent = self.entry(kw, 0, timeout, seed) if (kw or timeout or seed) else \
            (self._calls.get(()) or self.entry({}))
        return self._forward_np(ent, inputs, out)

    def _forward_np(self, ent, inputs, out):
        fc = _fast.fc
        if out is None and self._fast and fc:
            r = fc.call(self.client, self, ent, inputs, 0, None, 0)
            if r is not NotImplemented:
                return r
        c = self.client
        h = c.check_handle()
        n_in = len(inputs)
        n_out = self.num_outputs
        bufs = c.records(n_in, n_out)
        keep = []
        try:
            ib = bufs[0]
            pack = c.pack_numpy
            if self.strided and any(type(x) is _ndarray and not x.flags.c_contiguous
                                    for x in inputs):
                sig, back, ent = self._pack_strided(ib, inputs, keep, ent)
            elif self.mutated_inputs:
                sig, back = self._pack_mutated(ib, inputs, keep)
            else:
                sig = tuple([pack(ib, i, x, keep) for i, x in enumerate(inputs)])
                back = ()
            if out is None:
                specs = self.specs(ent, sig)
                ob_addr = bufs[3]
                blocks = c.alloc_outputs(specs, ob_addr)
                rc = lib.mxop_forward(h, self._p, ent.addr, bufs[1], n_in, ob_addr, n_out)
                if rc < 0:
                    raise c.error(rc)
                for dst, src in back:
                    np.copyto(dst, src)
                if self.dynamic_outputs:
                    # A view of the front of the block the largest shape took.
                    real = self.real_specs(specs, ob_addr)
                    res = []
                    for b, s, r in zip(blocks, specs, real):
                        v = view(b, s.npdtype, s.shape)
                        if r.shape != s.shape:
                            v = v.reshape(-1)[:r.nbytes // v.itemsize].reshape(r.shape)
                        res.append(v)
                    return res[0] if n_out == 1 else tuple(res)
                if n_out == 1:
                    s = specs[0]
                    return view(blocks[0], s.npdtype, s.shape)
                return tuple(view(b, s.npdtype, s.shape) for b, s in zip(blocks, specs))
            outs = (out,) if isinstance(out, _ndarray) else tuple(out)
            if len(outs) != n_out:
                raise InvalidArgument(ArityMismatch.code, "op '%s' has %d outputs, out= gave %d"
                                      % (self.name, n_out, len(outs)))
            for i, o in enumerate(outs):
                if not isinstance(o, _ndarray) or not o.flags.c_contiguous \
                        or not o.flags.writeable:
                    raise InvalidArgument("out[%d] must be a writable C-contiguous "
                                                 "NumPy array" % i)
                pack(bufs[2], i, o, keep)
            rc = lib.mxop_forward(h, self._p, ent.addr, bufs[1], n_in, bufs[3], n_out)
            if rc < 0:
                raise c.error(rc)
            for dst, src in back:
                np.copyto(dst, src)
            if self.dynamic_outputs:
                # The real shapes, as views of the front of the arrays given.
                outs = tuple(o.reshape(-1)[:s.nbytes // o.itemsize].reshape(s.shape)
                             for o, s in zip(outs, self.real_specs(
                                 [OutSpec(_MX_OF_NP[o.dtype], o.shape) for o in outs],
                                 bufs[3])))
            return outs[0] if n_out == 1 else outs
        finally:
            c.give_records(bufs)

    def real_specs(self, specs, ob_addr):
        """specs with each dynamic output's shape replaced by the real one
        mxop_forward wrote into its mxop_array_t record."""
        return real_specs(specs, ob_addr, self.dynamic_outputs)

    # _fastcall.c calls specs() by this name; _entry for older callers.
    _specs = specs
    _entry = entry

    def _pack_strided(self, ib, inputs, keep, ent):
        """Packs the inputs of an MXOP_OP_STRIDED op: a non-contiguous array
        in shared memory goes with its strides (no copy); anything else as
        _pack_mutated would.  Returns (sig, back, the call entry to use)."""
        sig = []
        strides = []
        rest = []
        for i, x in enumerate(inputs):
            st = self._shared_strides(x)
            if st is None:
                rest.append(i)
                sig.append(None)
                strides.append(None)
                continue
            a, region, offset = st[0], st[1], st[2]
            code = _MX_OF_NP[a.dtype]
            ndim = a.ndim
            _pack_array(ib, i * _ASZ, a.__array_interface__["data"][0], code, ndim, *a.shape,
                        *_ZPAD[ndim], region, offset, a.nbytes, 0)
            sig.append((code, a.shape))
            arr = (ctypes.c_int64 * max(ndim, 1))(*[s // a.itemsize for s in a.strides])
            keep.append(arr)
            strides.append(arr)
        back = []
        if rest:
            sub, back = self._pack_mutated(ib, inputs, keep, only=rest)
            for i, v in zip(rest, sub):
                sig[i] = v
        ptrs = (ctypes.c_void_p * max(len(inputs), 1))(
            *[_addressof(a) if a is not None else None for a in strides])
        keep.append(ptrs)
        call = ent.call
        strided = CallEntry(ent.key, ent.pairs, state=call.state, timeout_ms=call.timeout_ms,
                             seed=call.seed)
        strided.call.in_strides = _addressof(ptrs)
        keep.append(strided)
        return tuple(sig), back, strided

    def _shared_strides(self, x):
        """(x, region, offset) when x is a non-contiguous NumPy array with
        non-negative strides inside this client's shared memory, else None."""
        if type(x) is not _ndarray or x.flags.c_contiguous or x.dtype not in _MX_OF_NP \
                or x.ndim > MAX_DIMS or x.size == 0:
            return None
        if any(s < 0 or s % x.itemsize for s in x.strides):
            return None
        if (self.mutated_inputs and not x.flags.writeable):
            return None  # refused with its message by _pack_mutated
        ptr = x.__array_interface__["data"][0]
        extent = sum((d - 1) * s for d, s in zip(x.shape, x.strides)) + x.itemsize
        base = x.base
        while type(base) is _ndarray:
            base = base.base
        b = getattr(base, "_mxop", None)
        if type(b) is Block and b.client is self.client and \
                b.data <= ptr and ptr + extent <= b.data + b.nbytes:
            return x, b.region, b.offset + (ptr - b.data)
        ro = self.client.region_of(ptr, extent)
        if ro is None:
            return None
        return x, ro[0], ro[1]

    def _pack_mutated(self, ib, inputs, keep, only=None):
        """Packs the inputs of an op that writes some of them in place.

        A mutated input must be a writable NumPy array: anything else would
        be converted to a temporary copy and the op's writes lost.  One that
        had to be copied to be sent (non-contiguous, foreign byte order) is
        copied back after the call; the pairs (original, copy) are returned
        for that."""
        pack = self.client.pack_numpy
        sig = []
        back = []
        for i, x in enumerate(inputs):
            if only is not None and i not in only:
                continue
            if not (i < 64 and (self.mutated_inputs >> i) & 1):
                sig.append(pack(ib, i, x, keep))
                continue
            if not isinstance(x, _ndarray):
                raise InvalidArgument("op '%s' writes input %d in place; it must be a "
                                      "NumPy array, not %s" % (self.name, i, type(x).__name__))
            if not x.flags.writeable:
                raise InvalidArgument("op '%s' writes input %d in place, but that array "
                                      "is read-only (writeable=False)" % (self.name, i))
            n = len(keep)
            sig.append(pack(ib, i, x, keep))
            if len(keep) > n:
                back.append((x, keep[-1]))
        return tuple(sig), back

    def backward(self, ograds, inputs, outputs, needs=None, timeout=None, seed=None,
                 attrs=None, **kw):
        """Gradients of the inputs: in = [ograds, inputs, outputs] as the op's
        backward takes them.  `needs`: a bool per input; False skips that
        gradient (req null) and gives None.  One input: the gradient alone,
        else a tuple."""
        if attrs:
            kw = {**attrs, **kw}
        ent = self.entry(kw, 0, timeout, seed)
        return self._backward_np(ent, ograds, inputs, outputs, needs)

    def _backward_np(self, ent, ograds, inputs, outputs, needs):
        c = self.client
        h = c.check_handle()
        allin = list(ograds) + list(inputs) + list(outputs)
        n_fwd = len(inputs)
        bufs = c.records(len(allin), n_fwd)
        keep = []
        try:
            ib = bufs[0]
            sig = [c.pack_numpy(ib, i, x, keep) for i, x in enumerate(allin)]
            off = len(ograds)
            ob_addr = bufs[3]
            specs = [OutSpec(*sig[off + i]) for i in range(n_fwd)]
            blocks = c.alloc_outputs(specs, ob_addr, needs)
            rc = lib.mxop_backward(h, self._p, ent.addr, bufs[1], len(allin), ob_addr,
                                   n_fwd)
            if rc < 0:
                raise c.error(rc)
            res = tuple(None if needs is not None and not needs[i] else
                        view(b, s.npdtype, s.shape)
                        for i, (b, s) in enumerate(zip(blocks, specs)))
            return res[0] if n_fwd == 1 else res
        finally:
            c.give_records(bufs)

    # ---- stateful ops -----------------------------------------------------

    def create_state(self, *inputs, attrs=None, **kw):
        """An instance of a stateful op for inputs like these (arrays or
        (shape, dtype) pairs); the attributes are kept with it."""
        if attrs:
            kw = {**attrs, **kw}
        return State(self, kw, tuple(_spec_of(x) for x in inputs))


class BoundOp:
    """An op with its attributes fixed (Op.bind)."""

    def __init__(self, op, ent):
        self.op = op
        self._ent = ent
        self.attrs = dict(ent.pairs)

    def __call__(self, *inputs, out=None):
        return self.op._forward_np(self._ent, inputs, out)

    def backward(self, ograds, inputs, outputs, needs=None):
        return self.op._backward_np(self._ent, ograds, inputs, outputs, needs)

    def __repr__(self):
        return "<mxop.BoundOp %s %r>" % (self.op.name, self.attrs)


_all_states = weakref.WeakSet()


def states_of(client):
    """The open States of `client`'s ops."""
    return [s for s in list(_all_states) if s.op.client is client and s.id]


class State:
    """An instance of a stateful op, living in the worker.

    Call it like the op; backward() like Op.backward.  After a worker crash
    calls raise StateLost; recreate() makes a fresh instance (nothing is
    recreated behind your back).  close() (or garbage collection) destroys it.
    """

    def __init__(self, op, kw, sig):
        self.op = op
        self._kw = dict(kw)
        self._sig = sig
        self.id = 0
        self._create()
        _all_states.add(self)

    def _create(self):
        c = self.op.client
        ent = self.op.entry(self._kw)
        n = len(self._sig)
        dts = (ctypes.c_int32 * max(n, 1))(*[d for d, _ in self._sig])
        shs = (MxopShape * max(n, 1))()
        for i, (_, shape) in enumerate(self._sig):
            shs[i].ndim = len(shape)
            for j, d in enumerate(shape):
                shs[i].dims[j] = d
        sid = ctypes.c_uint64()
        c.check(lib.mxop_state_create(c.check_handle(), self.op.pointer, ent.attrs_addr, n,
                                      _addressof(dts), _addressof(shs), ctypes.byref(sid)))
        self.id = sid.value
        self._ent = CallEntry(ent.pairs, ent.pairs, state=self.id)

    @property
    def entry(self):
        """The CallEntry of this instance's calls."""
        return self._ent

    def recreate(self):
        """Replaces the instance by a new one (e.g. after StateLost)."""
        self.close()
        self._create()

    def __call__(self, *inputs, out=None):
        self.check_open()
        return self.op._forward_np(self._ent, inputs, out)

    def backward(self, ograds, inputs, outputs, needs=None):
        self.check_open()
        return self.op._backward_np(self._ent, ograds, inputs, outputs, needs)

    def check_open(self):
        """Raises InvalidArgument if the state is closed."""
        if not self.id:
            raise InvalidArgument("state of op '%s' is closed" % self.op.name)

    def close(self):
        sid, self.id = self.id, 0
        c = self.op.client
        h = c.handle
        if sid and h:
            rc = lib.mxop_state_destroy(h, sid)
            # A state lost with a crashed worker is gone already: nothing to undo.
            if rc < 0 and rc not in (UnknownState.code, StateLost.code, Disconnected.code):
                raise c.error(rc)

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return "<mxop.State %s id=%#x>" % (self.op.name, self.id)
