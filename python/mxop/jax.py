"""mxop ops as JAX functions, through XLA's FFI (jax.ffi).

    import mxop, mxop.jax, jax, jax.numpy as jnp
    relu = mxop.jax.load(None, "relu.so").relu        # None: the default client
    y = jax.jit(relu)(jnp.array([-1.0, 2.0]))
    g = jax.grad(lambda x: relu(x).sum())(jnp.array([-1.0, 2.0]))

Each call is one XLA custom call to the C handler of _jaxffi.c, which runs
the op through libmxop (no Python at run time, unlike jax.pure_callback):

  - shapes and dtypes (JAX's abstract evaluation) come from the op's own
    inference, asked of the worker at trace time (mxop_infer, cached);
  - gradients: jax.custom_vjp whose backward is the op's backward
    (another custom call); an op without one raises NotSupported under grad;
  - jax.vmap: through ffi_call's vmap_method, "sequential" by default
    (one op call per batch element, right for any op); an op that accepts
    a leading batch dimension itself may be wrapped with
    vmap_method="broadcast_all" or "expand_dims" (see jax.ffi.ffi_call);
  - attributes are keywords, static (compile-time) values: a traced value
    there is an InvalidAttribute naming the op and the attribute;
  - an op whose output shape depends on the data (Op.dynamic_outputs) is
    refused under jit/vmap/grad (XLA needs static shapes) and runs eagerly
    outside them (through the NumPy path, the result copied into JAX);
  - a failure while the compiled program runs (the worker crashed, the
    op's error, a deadline) is raised by JAX (jax.errors.JaxRuntimeError)
    with a message naming the op and mxop's error name (error_of(e) gives
    the mxop exception it stands for); the session goes on: the next call
    runs on a fresh worker.

XLA's buffers are plain host memory: libmxop stages each input into the
session's shared memory and each output back (one copy each way).  CPU
only.  A compiled program holds addresses of this process's call records:
it cannot be serialized (jax.export); run after its client is closed, it
raises (the client is closed) instead of touching the freed session.
Stateful ops and ops that write their inputs in place are refused (JAX
arrays are immutable).
"""

import ctypes
import os
import re
import threading
import weakref

import numpy as np
import jax
import jax.numpy as jnp

from . import _dtypes, _lib
from . import client as _client
from ._attrs import attr_value
from ._records import CallEntry, milliseconds
from ._lib import lib
from . import errors as _errors
from .errors import (ArityMismatch, InvalidArgument, InvalidAttribute, NotSupported,
                     LibraryNotFound, MxopError, ShapeMismatch)

__all__ = ["load", "wrap", "error_of", "JaxOp", "VMAP_METHODS", "DEFAULT_VMAP_METHOD"]

TARGET = "mxop_call"
VMAP_METHODS = ("sequential", "sequential_unrolled", "expand_dims", "broadcast_all")
DEFAULT_VMAP_METHOD = "sequential"

# mxop dtype number <-> JAX dtype, from libmxop's framework names (filled
# when the package's dtype tables are).
_JNP_OF = {}
_MX_OF_JNP = {}


def _fill_dtypes():
    for code, name in enumerate(_dtypes.FRAMEWORK_NAMES):
        d = getattr(jnp, name if name != "bool" else "bool_", None)
        if d is not None:
            _JNP_OF[code] = d
            _MX_OF_JNP[np.dtype(d)] = code


_dtypes.on_fill(_fill_dtypes)


class _JaxCall(ctypes.Structure):
    """mxop_jaxffi_call_t (_jaxffi.c)."""

    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("backward", ctypes.c_int32),
        ("client", ctypes.c_void_p),
        ("op", ctypes.c_void_p),
        ("call", ctypes.c_void_p),
        ("what", ctypes.c_char_p),
        ("forward_fn", ctypes.c_void_p),
        ("backward_fn", ctypes.c_void_p),
        ("last_error", ctypes.c_void_p),
        ("err_name", ctypes.c_void_p),
    ]


_state = {"ffi": None}
_state_lock = threading.Lock()

# Each client's call records: when it closes their client becomes NULL, so
# that a program compiled before raises instead of using a freed client.
_records = weakref.WeakKeyDictionary()


def _client_closing(c):
    for r in _records.pop(c, ()):
        r.client = None


_client.close_hooks.append(_client_closing)


def _find_ffi():
    """Path of _jaxffi.so: beside this package (an installed copy), else the build tree."""
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_jaxffi.so")
    if os.path.exists(here):
        return here
    p = os.path.join(_lib.build_dir(), "python", "_jaxffi.so")
    if os.path.exists(p):
        return p
    raise LibraryNotFound("mxop.jax: _jaxffi.so not found beside the package nor in %s "
                          "(make jax builds it against the jaxlib of build/venv)"
                          % os.path.join(_lib.build_dir(), "python"))


def _ffi():
    """The handler's library, registered with XLA once per process."""
    with _state_lock:
        if _state["ffi"] is None:
            dll = ctypes.CDLL(_find_ffi())
            dll.mxop_jaxffi_call_size.restype = ctypes.c_size_t
            if dll.mxop_jaxffi_call_size() != ctypes.sizeof(_JaxCall):
                raise InvalidArgument("mxop.jax: _jaxffi.so's call record is %d bytes, "
                                      "this module's %d: a stale build"
                                      % (dll.mxop_jaxffi_call_size(), ctypes.sizeof(_JaxCall)))
            jax.ffi.register_ffi_target(TARGET, jax.ffi.pycapsule(dll.mxop_jaxffi_handler),
                                        platform="cpu")
            _state["ffi"] = dll
        return _state["ffi"]


_FFI_MESSAGE = re.compile(r"mxop[^:\n]*: (MXOP_E[A-Z0-9_]+): (.*?)(?:\n-{8,}|\Z)", re.S)


def error_of(exc):
    """The mxop error (an MxopError subclass: WorkerCrashed, Timeout, ...)
    that a JAX runtime error raised by a compiled program carries, or None
    when it is not an mxop op's failure:

        try:
            y = jax.block_until_ready(f(x))
        except jax.errors.JaxRuntimeError as e:
            if isinstance(mxop.jax.error_of(e), mxop.WorkerCrashed): ...
    """
    m = _FFI_MESSAGE.search(str(exc))
    code = _errors.code_of(m.group(1)) if m is not None else None
    if code is None:
        return None
    return _errors.make_error(code, m.group(2).strip())


def _addr(fn):
    return ctypes.cast(fn, ctypes.c_void_p).value


def _is_traced(v):
    return isinstance(v, jax.core.Tracer)


def load(client, library, vmap_method=DEFAULT_VMAP_METHOD):
    """Loads `library` on `client` (None: mxop.default_client()) and returns
    an object whose attributes are its ops as JaxOps."""
    if client is None:
        import mxop

        client = mxop.default_client()
    lib_ = client.load(library)
    return _JaxLibrary(library, {n: JaxOp(op, vmap_method) for n, op in lib_.ops.items()})


def wrap(op, vmap_method=DEFAULT_VMAP_METHOD):
    """A JaxOp for an mxop.Op (client.op("relu"))."""
    return JaxOp(op, vmap_method)


class _JaxLibrary:
    def __init__(self, name, ops):
        self.name = name
        self.ops = ops

    def __getattr__(self, name):
        try:
            return self.__dict__["ops"][name]
        except KeyError:
            raise AttributeError("library %r has no op %r (it has: %s)"
                                 % (self.name, name, ", ".join(self.ops))) from None

    def __getitem__(self, name):
        return self.ops[name]


class JaxOp:
    """An mxop op callable on JAX arrays, under jit, vmap and grad.

    op(*arrays, **attributes): attributes are static keywords (Python
    values); `timeout=` (seconds) is the call's deadline."""

    def __init__(self, op, vmap_method=DEFAULT_VMAP_METHOD):
        if vmap_method not in VMAP_METHODS:
            raise InvalidArgument("op '%s': vmap_method must be one of %s, got %r"
                                  % (op.name, ", ".join(VMAP_METHODS), vmap_method))
        self.op = op
        self.name = op.name
        self.vmap_method = vmap_method
        self._what = ("op '%s' (%s)" % (op.name, op.library)).encode()
        self._fns = {}
        self._keep = []  # call records and their mxop_call_t: alive as long as the process

    def __repr__(self):
        return "<mxop.jax.JaxOp %s (%s), vmap_method=%r>" % (self.name, self.op.library,
                                                           self.vmap_method)

    # ---- checks ------------------------------------------------------------

    def _err(self, cls, code, text):
        """cls(code, text) with the op named; code None: the class's own."""
        text = "op '%s' (%s): %s" % (self.name, self.op.library, text)
        return cls(text) if code is None else cls(code, text)

    def _check_attrs(self, kw):
        for k, v in kw.items():
            vs = v if isinstance(v, (list, tuple)) else (v,)
            for x in vs:
                if _is_traced(x) or isinstance(x, jax.Array):
                    raise self._err(
                        InvalidAttribute, None,
                        "attribute '%s' is a JAX array%s; attributes are static: pass a Python "
                        "value (with jax.jit, mark the argument static: static_argnames)"
                        % (k, " traced by a JAX transformation" if _is_traced(x) else ""))
                if not isinstance(x, (bool, int, float, str, bytes, np.generic)):
                    raise self._err(InvalidAttribute, None,
                                    "attribute '%s' is a %s; attributes are Python numbers, "
                                    "bools, strings or lists of them"
                                    % (k, type(x).__name__))

    def _sig(self, xs):
        sig = []
        for i, x in enumerate(xs):
            dt = np.dtype(x.dtype)
            code = _MX_OF_JNP.get(dt)
            if code is None:
                raise self._err(InvalidArgument, None,
                                "input %d has dtype %s, which mxop has not (%s)"
                                % (i, dt.name, ", ".join(_dtypes.NAMES)))
            if len(x.shape) > _lib.MAX_DIMS:
                raise self._err(InvalidArgument, ShapeMismatch.code,
                                "input %d has rank %d (mxop takes at "
                                "most %d)" % (i, len(x.shape), _lib.MAX_DIMS))
            sig.append((code, tuple(int(d) for d in x.shape)))
        return tuple(sig)

    def _specs(self, ent, sig):
        """The outputs' (shape, JAX dtype), from the op's inference."""
        try:
            specs = self.op.specs(ent, sig)
        except MxopError as e:
            msg = e.message if hasattr(e, "message") else str(e)
            if ("'%s'" % self.name) not in msg:
                msg = "op '%s' (%s): %s" % (self.name, self.op.library, msg)
            raise type(e)(e.code, msg) from None
        return [jax.ShapeDtypeStruct(s.shape, _JNP_OF[s.dtype]) for s in specs]

    # ---- the custom calls --------------------------------------------------

    def _record(self, ent, backward):
        c = self.op.client
        r = _JaxCall(struct_size=ctypes.sizeof(_JaxCall), backward=int(backward),
                     client=c.check_handle(), op=self.op.pointer, call=ent.addr, what=self._what,
                     forward_fn=_addr(lib.mxop_forward), backward_fn=_addr(lib.mxop_backward),
                     last_error=_addr(lib.mxop_last_error), err_name=_addr(lib.mxop_err_name))
        self._keep.append((r, ent))
        _records.setdefault(c, []).append(r)
        return np.uint64(ctypes.addressof(r))

    def _fn(self, kw, timeout):
        key = (tuple(sorted((k, tuple(v) if isinstance(v, list) else v)
                            for k, v in kw.items())), timeout)
        fn = self._fns.get(key)
        if fn is not None:
            return fn
        # A call entry of our own (the Op's cache may drop its own entries).
        ent = CallEntry(None, tuple((str(k), attr_value(v)) for k, v in kw.items()),
                        timeout_ms=milliseconds(timeout, "timeout") if timeout else 0)
        fwd_rec = self._record(ent, False)
        bwd_rec = self._record(ent, True) if self.op.has_backward else None
        vm = self.vmap_method

        def forward(*xs):
            out = self._specs(ent, self._sig(xs))
            ys = jax.ffi.ffi_call(TARGET, out, vmap_method=vm)(*xs, mxop_call=fwd_rec)
            return tuple(ys)

        @jax.custom_vjp
        def f(*xs):
            return forward(*xs)

        def f_fwd(*xs):
            ys = forward(*xs)
            return ys, (xs, ys)

        def f_bwd(res, gs):
            xs, ys = res
            if bwd_rec is None:
                raise self._err(NotSupported, None, "the op has no backward: it cannot be "
                                "differentiated (jax.grad / jax.vjp)")
            out = [jax.ShapeDtypeStruct(x.shape, x.dtype) for x in xs]
            gs = tuple(jnp.zeros(y.shape, y.dtype) if g is None or
                       np.dtype(g.dtype) == jax.dtypes.float0 else g for g, y in zip(gs, ys))
            dxs = jax.ffi.ffi_call(TARGET, out, vmap_method=vm)(*gs, *xs, *ys,
                                                                mxop_call=bwd_rec)
            return tuple(None if not jnp.issubdtype(x.dtype, jnp.inexact) else d
                         for d, x in zip(dxs, xs))

        f.defvjp(f_fwd, f_bwd)
        self._fns[key] = f
        return f

    # ---- the call ------------------------------------------------------------

    def __call__(self, *inputs, timeout=None, **kw):
        op = self.op
        _ffi()
        if op.stateful:
            raise self._err(NotSupported, None, "a stateful op cannot be called from JAX "
                            "(its state lives in one worker, outside XLA's program)")
        if op.mutated_inputs:
            raise self._err(NotSupported, None, "the op writes its inputs in place; JAX "
                            "arrays are immutable")
        if op.num_inputs >= 0 and len(inputs) != op.num_inputs:
            raise self._err(InvalidArgument, ArityMismatch.code, "takes %d inputs, got %d"
                            % (op.num_inputs, len(inputs)))
        self._check_attrs(kw)
        if timeout is not None and (_is_traced(timeout) or isinstance(timeout, jax.Array)):
            raise self._err(InvalidArgument, None, "timeout= must be a Python number")
        xs = tuple(x if isinstance(x, jax.Array) else jnp.asarray(x) for x in inputs)
        self._sig(xs)
        if op.dynamic_outputs:
            if any(_is_traced(x) for x in xs):
                raise self._err(NotSupported, None,
                                "its output shape depends on the data (dynamic outputs), and "
                                "XLA needs static shapes: it cannot run under jax.jit, vmap or "
                                "grad; call it outside them")
            ys = op(*[np.asarray(x) for x in xs], timeout=timeout, **kw)
            ys = ys if isinstance(ys, tuple) else (ys,)
            ys = tuple(jnp.array(np.array(y)) for y in ys)
            return ys[0] if len(ys) == 1 else ys
        ys = self._fn(kw, timeout)(*xs)
        return ys[0] if len(ys) == 1 else ys
