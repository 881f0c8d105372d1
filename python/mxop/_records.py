"""What a call hands libmxop: mxop_array_t records, prebuilt mxop_call_t
entries and the outputs' specs.  Shared by the NumPy, PyTorch and JAX layers.

A record is written whole with one struct.pack_into (pack_array(buf,
i * ARRAY_SIZE, data, dtype, ndim, *shape, *ZPAD[ndim], region, offset,
nbytes, req)): far cheaper than a dozen ctypes attribute stores.
"""

import ctypes

from . import _lib
from ._dtypes import NUMPY_OF, SIZES
from ._lib import MxopArray, MxopCall
from .errors import InvalidArgument

MAX_DIMS = _lib.MAX_DIMS
ARRAY_SIZE = _lib.ARRAY_SIZE
pack_array = _lib.ARRAY_STRUCT.pack_into
# Offset of mxop_array_t.req (an output skipped with REQ_NULL).
OFF_REQ = MxopArray.req.offset
# The zero tail of a shape of k dimensions, by k.
ZPAD = tuple((0,) * (MAX_DIMS - k) for k in range(MAX_DIMS + 1))


def milliseconds(seconds, what):
    """`seconds` as a positive number of milliseconds (`what` names it in the error)."""
    ms = int(round(seconds * 1000))
    if ms <= 0:
        raise InvalidArgument("%s must be positive, got %r s" % (what, seconds))
    return ms


class OutSpec:
    """An inferred output: dtype, shape, and the C shape array for mxop_array_alloc."""

    __slots__ = ("dtype", "ndim", "shape", "cshape", "caddr", "npdtype", "nbytes")

    def __init__(self, dtype, shape):
        self.dtype = dtype
        self.shape = tuple(int(d) for d in shape)
        self.ndim = len(self.shape)
        self.cshape = (ctypes.c_int64 * MAX_DIMS)(*self.shape)
        self.caddr = ctypes.addressof(self.cshape)
        self.npdtype = NUMPY_OF.get(dtype)
        n = SIZES[dtype]
        for d in self.shape:
            n *= d
        self.nbytes = n


class CallEntry:
    """A prebuilt mxop_call_t with its attribute array (one per attribute set)."""

    __slots__ = ("key", "call", "addr", "attrs", "attrs_addr", "keep", "pairs")

    def __init__(self, key, pairs, state=0, timeout_ms=0, seed=0):
        self.key = key
        self.pairs = pairs  # ((key, value-string), ...)
        self.keep = [s.encode() for kv in pairs for s in kv]
        if pairs:
            self.attrs = (ctypes.c_char_p * (len(self.keep) + 1))(*self.keep, None)
            self.attrs_addr = ctypes.addressof(self.attrs)
        else:
            self.attrs = None
            self.attrs_addr = None
        self.call = MxopCall(struct_size=ctypes.sizeof(MxopCall), attrs=self.attrs_addr,
                             state=state, timeout_ms=timeout_ms, seed=seed)
        self.addr = ctypes.addressof(self.call)


def real_specs(specs, ob_addr, dynamic_outputs):
    """specs with each dynamic output's shape (bit j of dynamic_outputs:
    output j) replaced by the real one mxop_forward wrote into its
    mxop_array_t record at ob_addr."""
    out = list(specs)
    for j in range(len(out)):
        if j < 64 and (dynamic_outputs >> j) & 1:
            rec = MxopArray.from_address(ob_addr + j * ARRAY_SIZE)
            out[j] = OutSpec(out[j].dtype, tuple(rec.shape[:rec.ndim]))
    return out
