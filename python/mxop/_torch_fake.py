"""Fake kernels of torch.ops.mxop.<op> under symbolic sizes (torch.compile
with dynamic shapes, torch.export): output sizes as symbols of the inputs,
found by probing the op's shape inference in the worker (output_shapes)."""

from .errors import NotSupported

# Stand-in sizes for the symbolic sizes of an input, when the fake kernel
# probes the op's shape inference (see output_shapes): distinct, and unlike
# the sizes of real programs.
_PROBE0 = 7919


def output_shapes(op, ent, tensors, dtype_code, torch_of):
    """(dtypes, shapes) of the op's outputs for fake inputs whose sizes may
    be symbolic (torch.compile with dynamic shapes, torch.export).

    The worker's inference takes integers, so it runs with each symbol's
    hint (its value in the example inputs), then once per symbol with that
    symbol alone given a stand-in value.  An output size that moves with
    exactly one symbol, as that symbol, is that symbol; one that moves with
    none is a constant.  A symbol the inference refuses to move (gemm's
    inner size, tied to a weight's) is specialised to its hint, with a
    guard (torch recompiles when it changes), as torch does for its own
    ops.  Any other output size (2*n, n+m) cannot be said with the symbols
    and is refused with an error naming the op, never guessed.

    dtype_code and torch_of: mxop.torch's dtype tables (torch dtype -> mxop
    code, and back)."""
    from torch.fx.experimental.symbolic_shapes import guard_int

    syms = {}  # expression -> [SymInt, base value, stand-in]
    where = []  # per input: per dim, its symbol's key or None
    for x in tensors:
        keys = []
        for d in x.shape:
            if isinstance(d, int):
                keys.append(None)
                continue
            node = d.node
            key = str(node.expr)
            if key not in syms:
                base = node.hint if node.has_hint() else None
                syms[key] = [d, base, _PROBE0 + 104729 * len(syms)]
            keys.append(key)
        where.append(keys)

    def sig(moved=None, fixed=()):
        out = []
        for x, keys in zip(tensors, where):
            dims = []
            for d, k in zip(x.shape, keys):
                if k is None:
                    dims.append(d)
                elif k == moved:
                    dims.append(syms[k][2])
                elif syms[k][1] is not None:
                    dims.append(syms[k][1])
                else:  # unbacked (a data-dependent size): any stand-in will do
                    dims.append(syms[k][2] + 1)
            out.append((dtype_code(x.dtype), tuple(dims)))
        return tuple(out)

    specs = op.specs(ent, sig())
    dts = [torch_of[s.dtype] for s in specs]
    if not syms:
        return dts, [s.shape for s in specs]
    base = [list(s.shape) for s in specs]
    shapes = [list(s.shape) for s in specs]
    owner = [[None] * len(s.shape) for s in specs]
    for key, (d, hint, probe) in syms.items():
        try:
            moved = op.specs(ent, sig(key))
        except Exception as e:
            if hint is None:
                raise NotSupported("op '%s' cannot be traced: its shape inference "
                                   "refused a stand-in for the data-dependent size %s (%s)"
                                   % (op.name, key, e)) from None
            guard_int(d)  # the op needs this size as it is: specialised, with a guard
            continue
        for j, (m, b) in enumerate(zip(moved, base)):
            if len(m.shape) != len(b) or m.dtype != specs[j].dtype:
                raise NotSupported("op '%s': output %d's rank or dtype depends on "
                                   "input sizes; it cannot be traced with symbolic sizes"
                                   % (op.name, j))
            for k, (u, v) in enumerate(zip(m.shape, b)):
                if u == v:
                    continue
                if u != probe or owner[j][k] is not None:
                    raise NotSupported("op '%s': size %d of output %d is a function "
                                       "of symbolic input sizes that mxop cannot express "
                                       "(only constants and input sizes are); compile with "
                                       "dynamic=False or mark these sizes static"
                                       % (op.name, k, j))
                owner[j][k] = key
                shapes[j][k] = d
    return dts, [tuple(s) for s in shapes]
