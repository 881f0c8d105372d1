"""mxop ops registered with PyTorch's dispatcher (torch.library; torch 2,
and torch 1.13 without the torch 2 parts).

Every op that mxop.torch loads becomes torch.ops.mxop.<op>, a custom op
that torch.jit.trace records as a call (not a constant), torch.jit.script
can call, torch.fx traces, and (torch 2) torch.compile, torch.export and
torch.library.opcheck take.  Per op:

  - the schema: its inputs (Tensor x0, Tensor x1, ... or Tensor[] inputs
    for a variadic op; Tensor(a!) for one it writes), its outputs (Tensor
    or a tuple), then keywords: the declared attributes, typed, each
    optional (None: the op's own default); without declarations `str?
    attrs`, "name=value" pairs joined by ";" (one string: jit.trace cannot
    record a list of strings); always `float? timeout` and `int? seed`;
  - CPU and CUDA: the call itself (mxop.torch's forward);
  - Autograd: a graph-building call is _Call, an autograd.Function made of
    dispatcher ops (mxop::<op> below autograd, and for backward
    mxop_bwd::<op>(grads, inputs, outputs, keywords), the op's backward as
    a custom op with its own fake kernel), so that AOTAutograd traces it;
    an op that writes its inputs keeps mxop.torch's Function (eager only);
  - fake (torch 2: register_fake) or Meta (torch 1.13): outputs from the
    op's shape and type inference, run in the worker once per signature,
    then cached (mxop.torch's _Target.fake: symbolic and data-dependent
    sizes).

This module knows nothing of mxop.torch's internals: the caller hands in
the callables (no import cycle).  One registration per op name per
process: the kernels call the op most recently registered under the name.

The C++ kernels (_torchops.cpp, built as _torchops.so beside this package
or in the build tree's python/): when they load, the CPU and Autograd
kernels of mxop::<op> are theirs, and the Python kernels above serve the
shadow op mxop_py::<op> (same schema), to which they hand every call they
do not make themselves (autograd graphs, keywords, first calls of a
signature, errors).  Without them (not built, not loadable, or
MXOP_NO_FASTCALL=1) the Python kernels are mxop::<op>'s own, as before.
"""

import ctypes
import os
import warnings

import torch
from torch.autograd import forward_ad as _fwad
from torch.library import Library

from . import _dtypes, _torch_dtypes
from . import _lib as _mxlib
from . import client as _cl

NAMESPACE = "mxop"
SHADOW = "mxop_py"
BACKWARD = "mxop_bwd"

# torch 2 (2.4 and later): fake kernels through torch.library.register_fake,
# which gives data-dependent outputs unbacked sizes; torch 1.13: a Meta kernel.
TORCH2 = hasattr(torch.library, "register_fake")
_below_autograd = torch._C._AutoDispatchBelowAutograd

_lib = None
_shadow = None
_ops = {}  # op name -> _Entry
_cpp = {"lib": None, "tried": False}


def _find_cpp():
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_torchops.so")
    if os.path.exists(here):
        return here
    p = os.path.join(_mxlib.build_dir(), "python", "_torchops.so")
    return p if os.path.exists(p) else None


def cpp():
    """The C++ kernels' library (ctypes), or None: not built, not loadable,
    or MXOP_NO_FASTCALL=1 (then the Python kernels serve, with a warning
    once when the file is missing or broken)."""
    if _cpp["tried"]:
        return _cpp["lib"]
    _cpp["tried"] = True
    if os.environ.get("MXOP_NO_FASTCALL", "") not in ("", "0"):
        return None
    path = _find_cpp()
    why = None
    if path is None:
        why = "_torchops.so not found (built by make python, against the interpreter's torch)"
    else:
        try:
            d = ctypes.CDLL(path)
            vp = ctypes.c_void_p
            d.mxop_torchops_error.restype = ctypes.c_char_p
            d.mxop_torchops_init.argtypes = [vp] * 5
            d.mxop_torchops_init.restype = ctypes.c_int
            d.mxop_torchops_register.argtypes = [ctypes.c_char_p, ctypes.c_int]
            d.mxop_torchops_bind.argtypes = [ctypes.c_char_p, vp, vp, vp, ctypes.c_int,
                                             ctypes.c_int, ctypes.c_int]
            d.mxop_torchops_wpid.argtypes = [vp, ctypes.c_long]
            d.mxop_torchops_closing.argtypes = [vp]
            d.mxop_torchops_release.argtypes = [vp]
            d.mxop_torchops_inflight.restype = ctypes.c_long
            d.mxop_torchops_calls.restype = ctypes.c_long
            d.mxop_torchops_set_forward.argtypes = [vp]
            d.mxop_torchops_set_forward.restype = vp
            d.mxop_torchops_set_backward.argtypes = [vp]
            d.mxop_torchops_set_backward.restype = vp
            d.mxop_torchops_enable.argtypes = [ctypes.c_int]
            lib = _mxlib.lib

            def addr(f):
                return ctypes.cast(f, vp).value

            # Always libmxop's own output functions: with mxop.allocator on,
            # mxop_array_alloc itself gives shared-heap blocks.
            if d.mxop_torchops_init(addr(lib.mxop_forward), addr(lib.mxop_backward),
                                    addr(lib.mxop_array_alloc), addr(lib.mxop_array_free),
                                    addr(lib.mxop_close)) != 0:
                raise RuntimeError(d.mxop_torchops_error().decode(errors="replace"))
            sh = _shadow_library()
            sh.define("_raise(Tensor x, str name, int rc) -> Tensor")
            sh.impl("_raise", _raise, "CPU")
            sh.define("_dtypes(int[] codes, Tensor[] samples) -> ()")
            codes, samples = _dtype_samples()
            getattr(torch.ops, SHADOW)._dtypes(codes, samples)
        except Exception as e:  # a stale or foreign build: the Python kernels serve
            why = "%s could not be loaded (%s)" % (path, e)
            d = None
        if d is not None:
            _cpp["lib"] = d
            _cl.use_torchops(_Hooks(d))
            from . import _interrupt

            _interrupt.cpp_inflight = d.mxop_torchops_inflight
            return d
    # A warning (shown once by Python's default filters), not the package's
    # logger: that one is silent until the program configures logging.
    warnings.warn("mxop: torch.ops.mxop kernels run in Python (slower calls): %s" % why,
                  RuntimeWarning, stacklevel=2)
    return None


class _Hooks:
    """What the client tells the C++ kernels of its sessions."""

    def __init__(self, d):
        self.d = d

    def wpid(self, c, pid):
        h = c.handle
        if h:
            self.d.mxop_torchops_wpid(h, pid)

    def closing(self, h):
        self.d.mxop_torchops_closing(h)

    def release(self, h):
        return self.d.mxop_torchops_release(h) == 1


def _dtype_samples():
    """([code], [tensor]): an empty CPU tensor of each libmxop dtype that
    torch has (the package's map, from libmxop's dtype names), for the C++
    kernels' dtype map."""
    _dtypes.count()  # the tables filled
    codes, samples = [], []
    for dt, code in sorted(_torch_dtypes.CODE_OF_TORCH.items(), key=lambda kv: kv[1]):
        codes.append(code)
        samples.append(torch.empty(0, dtype=dt, device="cpu"))
    return codes, samples


def cpp_calls():
    """Calls the C++ kernels made themselves so far (-1: they are not loaded)."""
    d = _cpp["lib"]
    return d.mxop_torchops_calls() if d is not None else -1


def _raise(x, name, rc):
    _ops[name].target.raise_rc(rc)
    raise RuntimeError("mxop op '%s' failed (%d)" % (name, rc))


def _bind(e):
    d = _cpp["lib"]
    if d is None or not e.cpp:
        return
    b = e.target.binding()
    if b is None:
        return
    c, p, call, fast, backward, n_in, n_out = b
    h = c.handle
    d.mxop_torchops_bind(e.name.encode(), h, p, call, (1 if fast else 0) | (2 if backward else 0),
                         n_in, n_out)
    d.mxop_torchops_wpid(h, c.__dict__.get(_cl.WORKER_PID_KEY, 0))


def rebind(name):
    """After the op behind `name` changed (a forked child's reconnection)."""
    e = _ops.get(name)
    if e is not None:
        _bind(e)


def _shadow_library():
    global _shadow
    if _shadow is None:
        _shadow = Library(SHADOW, "DEF")
    return _shadow


class _Entry:
    __slots__ = ("name", "variadic", "n_out", "decl", "target", "cpp", "mutated")


_bwd_lib = None


def _backward_library():
    global _bwd_lib
    if _bwd_lib is None:
        _bwd_lib = Library(BACKWARD, "DEF")
    return _bwd_lib


def _needs_grad(tensors):
    if not torch.is_grad_enabled():
        return False
    for t in tensors:
        if isinstance(t, torch.Tensor) and t.requires_grad:
            return True
    return False


class _Call(torch.autograd.Function):
    """One call of mxop::<op> in the autograd graph, made of dispatcher ops
    only, so that torch.compile (AOTAutograd) and torch.export trace it as
    they trace torch.library's own autograd: forward is mxop::<op> called
    below autograd, backward is mxop_bwd::<op>(grads, inputs, outputs)
    (the op's backward in the worker).  apply(entry, keywords, *inputs)."""

    @staticmethod
    def forward(ctx, e, kw, *tensors):
        args = (list(tensors),) if e.variadic else tensors
        with _below_autograd():
            out = op(e.name)(*args, **kw)
        outs = out if isinstance(out, (tuple, list)) else (out,)
        ctx.e = e
        ctx.kw = kw
        ctx.n_in = len(tensors)
        ctx.save_for_backward(*tensors, *outs)
        nondiff = [o for o in outs if not (o.is_floating_point() or o.is_complex())]
        if nondiff:
            ctx.mark_non_differentiable(*nondiff)
        return out if not isinstance(out, list) else tuple(out)

    @staticmethod
    def backward(ctx, *grads):
        saved = ctx.saved_tensors
        inputs, outputs = saved[:ctx.n_in], saved[ctx.n_in:]
        needs = ctx.needs_input_grad[2:]
        if True not in needs:
            return (None, None) + (None,) * ctx.n_in
        grads = [torch.zeros_like(o) if g is None else g for g, o in zip(grads, outputs)]
        res = getattr(getattr(torch.ops, BACKWARD), ctx.e.name)(
            grads, list(inputs), list(outputs), **ctx.kw)
        return (None, None) + tuple(
            r if (n and inputs[i].is_floating_point()) else None
            for i, (r, n) in enumerate(zip(res, needs)))


def _library():
    global _lib
    if _lib is None:
        _lib = Library(NAMESPACE, "DEF")
    return _lib


_TYPES = {"int": "int", "i64": "int", "i32": "int", "int64": "int", "float": "float",
          "f64": "float", "f32": "float", "double": "float", "bool": "bool", "str": "str",
          "string": "str"}


def _schema(name, n_in, n_out, decl, mutated=0):
    """The op's schema; inputs the op writes in place (bits of `mutated`)
    are annotated as written (Tensor(a!)), so that TorchScript does not
    reorder or merge calls around them."""
    if n_in < 0:
        args = ["Tensor[] inputs"]
    else:
        args = ["Tensor(%s!) x%d" % (chr(97 + i), i) if (mutated >> i & 1 and i < 26)
                else "Tensor x%d" % i for i in range(n_in)]
    kw = []
    if decl is None:
        kw.append("str? attrs=None")
    else:
        for a in decl:
            kw.append("%s? %s=None" % (_TYPES.get(str(a[1]).lower(), "str"), a[0]))
    kw += ["float? timeout=None", "int? seed=None"]
    outs = "Tensor" if n_out == 1 else "(%s)" % ", ".join(["Tensor"] * n_out)
    return "%s(%s) -> %s" % (name, ", ".join(args + ["*"] + kw), outs)


def _split(e, args, kw):
    """(tensors, attrs dict, timeout, seed) of a dispatcher call."""
    tensors = tuple(args[0]) if e.variadic else tuple(args)
    timeout = kw.pop("timeout", None)
    seed = kw.pop("seed", None)
    if e.decl is None:
        attrs = {}
        for s in (kw.pop("attrs", None) or "").split(";"):
            if not s.strip():
                continue
            k, sep, v = s.partition("=")
            if not sep:
                raise ValueError("mxop op '%s': attrs is 'name=value;name=value', got %r"
                                 % (e.name, s))
            attrs[k.strip()] = v
    else:
        attrs = {k: v for k, v in kw.items() if v is not None}
    return tensors, attrs, timeout, seed


def registered(name):
    """True if torch.ops.mxop.<name> is an mxop op of this process."""
    return name in _ops


def entry(name):
    """The registration of torch.ops.mxop.<name> in this process (its
    name, variadic, n_out, decl, target, mutated), or None."""
    return _ops.get(name)


def register(name, n_in, n_out, decl, target, mutated=0):
    """Registers op `name` (once per process) or points it at `target`.

    target: an object with run(tensors, attrs, timeout, seed, grad) (the
    call, with autograd when grad is true) and meta(tensors, attrs) (output
    (torch dtype, shape) pairs).  Returns False for a name the dispatcher
    cannot take (not an identifier)."""
    e = _ops.get(name)
    if e is not None:
        e.target = target
        _bind(e)
        return True
    if not name.isidentifier():
        return False
    e = _Entry()
    e.name = name
    e.variadic = n_in < 0
    e.n_out = n_out
    e.decl = [tuple(a) for a in decl] if decl is not None else None
    e.target = target
    lib = _library()

    def run(grad):
        def kernel(*args, **kw):
            if not e.variadic:
                for v in kw.values():
                    if v is not None:
                        break
                else:  # no keyword given (the common call): nothing to split
                    return e.target.run(args, {}, None, None, grad)
            tensors, attrs, timeout, seed = _split(e, args, kw)
            return e.target.run(tensors, attrs, timeout, seed, grad)
        return kernel

    def meta(*args, **kw):
        tensors, attrs, _, _ = _split(e, args, kw)
        outs = tuple(torch.empty(shape, dtype=dt, device="meta")
                     for dt, shape in e.target.meta(tensors, attrs))
        return outs[0] if e.n_out == 1 else outs

    def fake(*args, **kw):
        tensors, attrs, _, _ = _split(e, args, kw)
        outs = e.target.fake(tensors, attrs)
        return outs[0] if e.n_out == 1 else tuple(outs)

    def autograd(*args, **kw):
        # The graph-building call as _Call (dispatcher ops only); any
        # other goes below autograd to the CPU, CUDA or fake kernel.
        tensors = args[0] if e.variadic else args
        if _fwad._current_level >= 0:
            e.target.no_tangents(tensors)
        if _needs_grad(tensors):
            return _Call.apply(e, {k: v for k, v in kw.items() if v is not None}, *tensors)
        with _below_autograd():
            return op(e.name)(*args, **kw)

    graph_inplace = run(True)

    def autograd_inplace(*args, **kw):
        # An op that writes its inputs: its graph-building call through
        # mxop.torch's autograd.Function (eager only); any other below
        # autograd (CPU, CUDA, fake: functionalized under torch.compile).
        tensors = args[0] if e.variadic else args
        if _fwad._current_level >= 0:
            e.target.no_tangents(tensors)
        if _needs_grad(tensors):
            return graph_inplace(*args, **kw)
        with _below_autograd():
            return op(e.name)(*args, **kw)

    schema = _schema(name, n_in, n_out, e.decl, mutated)
    d = cpp() if not e.variadic else None
    e.cpp = False
    e.mutated = mutated
    # An op that writes its inputs keeps its autograd.Function of mxop.torch
    # (in eager mode only: mark_dirty); the others go through _Call.
    ag = run(True) if not TORCH2 else (autograd_inplace if mutated else autograd)
    lib.define(schema)
    if d is not None:
        sh = _shadow_library()
        sh.define(schema)
        sh.impl(name, run(False), "CPU")
        sh.impl(name, ag, "Autograd")
        sh.impl(name, run(False), "CUDA")
        sh.impl(name, meta, "Meta")
        e.cpp = d.mxop_torchops_register(name.encode(), n_in) == 0
        if not e.cpp:
            warnings.warn("mxop: torch.ops.mxop.%s runs in Python: %s"
                          % (name, d.mxop_torchops_error().decode(errors="replace")),
                          RuntimeWarning, stacklevel=2)
    if not e.cpp:
        lib.impl(name, run(False), "CPU")
        lib.impl(name, ag, "Autograd")
    lib.impl(name, run(False), "CUDA")
    if TORCH2:
        torch.library.register_fake("%s::%s" % (NAMESPACE, name), fake, lib=lib)
    else:
        lib.impl(name, meta, "Meta")
    if not mutated:
        _define_backward(e)
    _ops[name] = e
    _bind(e)
    return True


def _backward_schema(name, decl):
    kw = _schema(name, 1, 1, decl).split("*, ", 1)[1].split(")")[0]
    return "%s(Tensor[] grads, Tensor[] inputs, Tensor[] outputs, *, %s) -> Tensor[]" % (
        name, kw)


def _define_backward(e):
    """mxop_bwd::<op>(grads, inputs, outputs, keywords) -> the inputs'
    gradients: the op's backward as a dispatcher op (with a fake kernel:
    the gradients have the inputs' shapes), so that compiled and exported
    graphs carry it.  Its Autograd kernel links the gradients to what they
    depend on through an error node: an mxop backward is once-differentiable."""
    name = e.name
    lib = _backward_library()

    def split(kw):
        _, attrs, timeout, seed = _split(e, ([],) if e.variadic else (), dict(kw))
        return attrs, timeout, seed

    def kernel(grads, inputs, outputs, **kw):
        attrs, timeout, seed = split(kw)
        return e.target.backward(grads, inputs, outputs, attrs, timeout, seed)

    def fake(grads, inputs, outputs, **kw):
        return [torch.empty_like(t, memory_format=torch.contiguous_format) for t in inputs]

    def autograd(grads, inputs, outputs, **kw):
        with _below_autograd():
            res = getattr(getattr(torch.ops, BACKWARD), name)(grads, inputs, outputs, **kw)
        if _needs_grad(list(grads) + list(inputs)):
            res = e.target.once(res, list(grads) + list(inputs))
        return res

    lib.define(_backward_schema(name, e.decl))
    lib.impl(name, kernel, "CPU")
    lib.impl(name, kernel, "CUDA")
    lib.impl(name, autograd, "Autograd")
    if TORCH2:
        torch.library.register_fake("%s::%s" % (BACKWARD, name), fake, lib=lib)
    else:
        lib.impl(name, fake, "Meta")


def call_args(name, tensors, attrs, timeout, seed):
    """The positional and keyword arguments of torch.ops.mxop.<name> for a call."""
    e = _ops[name]
    args = (list(tensors),) if e.variadic else tuple(tensors)
    kw = {}
    if attrs:
        if e.decl is None:
            kw["attrs"] = ";".join("%s=%s" % (k, _text(v)) for k, v in attrs.items())
        else:
            kw.update(attrs)
    if timeout is not None:
        kw["timeout"] = float(timeout)
    if seed is not None:
        kw["seed"] = seed
    return args, kw


def _text(v):
    if v is True:
        return "1"
    if v is False:
        return "0"
    return str(v)


def op(name):
    """torch.ops.mxop.<name>."""
    return getattr(getattr(torch.ops, NAMESPACE), name)
