"""mxop dtype numbers and the NumPy dtypes (and torch dtype names) they map to.

Only native byte order maps; arrays in another are converted by the caller.
This module imports neither torch nor mxop.torch: a tensor's dtype is read
by its name ("torch.float32"), and mxop.torch builds its own table of torch
dtypes from CODE_OF_TORCH_NAME.
"""

import numpy as np

from . import _lib
from .errors import InvalidArgument

# mxop dtype number -> NumPy dtype (bf16 has none).
NUMPY_OF = {
    _lib.F32: np.dtype(np.float32),
    _lib.F64: np.dtype(np.float64),
    _lib.F16: np.dtype(np.float16),
    _lib.I32: np.dtype(np.int32),
    _lib.I64: np.dtype(np.int64),
    _lib.U8: np.dtype(np.uint8),
    _lib.I8: np.dtype(np.int8),
    _lib.BOOL: np.dtype(np.bool_),
}
CODE_OF_NUMPY = {v: k for k, v in NUMPY_OF.items()}
CODE_OF_NAME = {n: i for i, n in enumerate(_lib.DTYPE_NAMES)}
# torch dtype name (without "torch.") -> mxop dtype number.
CODE_OF_TORCH_NAME = {
    "float32": _lib.F32, "float64": _lib.F64, "float16": _lib.F16, "bfloat16": _lib.BF16,
    "int32": _lib.I32, "int64": _lib.I64, "uint8": _lib.U8, "int8": _lib.I8, "bool": _lib.BOOL,
}
NAMES = _lib.DTYPE_NAMES
SIZES = _lib.DTYPE_SIZES
COUNT = _lib.DTYPE_COUNT


def dtype_code(dtype):
    """The mxop dtype number of a NumPy dtype, an mxop name ("f32") or a number."""
    if isinstance(dtype, int) and not isinstance(dtype, bool):
        if 0 <= dtype < COUNT:
            return dtype
        raise InvalidArgument("unknown mxop dtype %d" % dtype)
    if isinstance(dtype, str) and dtype in CODE_OF_NAME:
        return CODE_OF_NAME[dtype]
    try:
        d = np.dtype(dtype)
    except TypeError:
        d = None
    code = CODE_OF_NUMPY.get(d)
    if code is None:
        raise InvalidArgument("dtype %r has no mxop equivalent (f32, f64, f16, i32, "
                                     "i64, u8, i8, bool)" % (dtype,))
    return code


def numpy_dtype(code):
    """The NumPy dtype of an mxop dtype number (bf16 has none)."""
    d = NUMPY_OF.get(code)
    if d is None:
        raise InvalidArgument("mxop dtype %s has no NumPy equivalent"
                              % (NAMES[code] if 0 <= code < COUNT else code))
    return d


def spec_of(x):
    """(mxop dtype, shape) of an array, a tensor or a (shape, dtype) pair."""
    if isinstance(x, tuple) and len(x) == 2 and not hasattr(x, "shape"):
        shape, dtype = x
        if isinstance(shape, int):
            shape = (shape,)
        return dtype_code(dtype), tuple(int(d) for d in shape)
    if hasattr(x, "dtype") and hasattr(x, "shape") and not isinstance(x, np.ndarray):
        name = str(x.dtype)  # a tensor's: "torch.float32"
        code = CODE_OF_TORCH_NAME.get(name[6:]) if name.startswith("torch.") else None
        if code is None:
            raise InvalidArgument("dtype %s has no mxop equivalent" % name)
        return code, tuple(x.shape)
    x = np.asarray(x)
    return dtype_code(x.dtype), tuple(x.shape)
