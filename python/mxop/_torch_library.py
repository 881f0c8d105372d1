"""mxop ops registered with PyTorch's dispatcher (torch.library, torch 1.13).

Every op that mxop.torch loads becomes torch.ops.mxop.<op>, so that
torch.jit.trace records it as a call (not a constant), torch.jit.script
can call it, and torch.fx traces it.  Per op, one schema and three kernels:

  - the schema: its inputs (Tensor x0, Tensor x1, ... or Tensor[] inputs
    for a variadic op), its outputs (Tensor or a tuple), then keywords:
    the declared attributes, typed, each optional (None: the op's own
    default); without declarations `str? attrs`, "name=value" pairs joined
    by ";" (one string: jit.trace cannot record a list of strings);
    always `float? timeout` and `int? seed`;
  - CPU and CUDA: the call itself (mxop.torch's forward);
  - Autograd: the call as an autograd Function (the op's backward);
  - Meta: outputs from the op's shape and type inference (run in the
    worker once per signature, then cached).

This module knows nothing of mxop.torch's internals: the caller hands in
the callables (no import cycle).  One registration per op name per
process: the kernels call the op most recently registered under the name.
"""

import torch
from torch.library import Library

NAMESPACE = "mxop"

_lib = None
_ops = {}  # op name -> _Entry


class _Entry:
    __slots__ = ("name", "variadic", "n_out", "decl", "target")


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


def register(name, n_in, n_out, decl, target, mutated=0):
    """Registers op `name` (once per process) or points it at `target`.

    target: an object with run(tensors, attrs, timeout, seed, grad) (the
    call, with autograd when grad is true) and meta(tensors, attrs) (output
    (torch dtype, shape) pairs).  Returns False for a name the dispatcher
    cannot take (not an identifier)."""
    e = _ops.get(name)
    if e is not None:
        e.target = target
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
    lib.define(_schema(name, n_in, n_out, e.decl, mutated))

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

    lib.impl(name, run(False), "CPU")
    lib.impl(name, run(False), "CUDA")
    lib.impl(name, run(True), "Autograd")
    lib.impl(name, meta, "Meta")
    _ops[name] = e
    return True


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
