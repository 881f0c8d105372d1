"""mxop calls in torch's autograd graph.

Fn is one call: forward runs the op, backward runs its backward with
in = [output gradients, inputs, outputs].  An mxop backward runs in the
worker and is once-differentiable: _Once makes a second derivative raise
instead of being silently zero.
"""

import torch

from . import _torch_pack
from .errors import InvalidArgument, NotSupported

_Tensor = torch.Tensor
_grad_enabled = torch.is_grad_enabled

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
        raise NotSupported("mxop op '%s' is once-differentiable: its backward runs "
                           "in the worker and cannot itself be differentiated (double "
                           "backward, e.g. a gradient penalty or gradgradcheck, is not "
                           "supported)" % ctx.name)


def no_double_backward(name, res, deps):
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
        outs = _torch_pack.forward(op, ent, inputs)
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
            raise NotSupported("op '%s' wrote an input in place; a gradient through "
                               "that input's new value is not supported" % op.name)
        if ctx.gen is not None and ctx.gen != op.gen:
            raise InvalidArgument("backward of stateful op '%s' (state %#x): the state "
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
                res = _torch_pack.backward(op, ctx.ent, grads, inputs, outputs, needs)
            res = no_double_backward(op.name, res, grads + tuple(inputs))
        else:
            res = _torch_pack.backward(op, ctx.ent, grads, inputs, outputs, needs)
        return (None, None) + res


# Under inference_mode() no graph is built even where enable_grad() turned
# grad mode back on (as for torch's own ops): its tensors cannot be saved.
inference_mode = getattr(torch, "is_inference_mode_enabled", lambda: False)


def needs_graph(tensors):
    if not torch.is_grad_enabled():
        return False
    for t in tensors:
        if isinstance(t, _Tensor) and t.requires_grad:
            return not inference_mode()
    return False


# The graph shows the call as "_FnBackward" (what tests and users have seen).
Fn = _Fn
