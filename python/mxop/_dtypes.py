"""mxop dtype numbers and what they are in NumPy (and, by name, in torch).

The tables are libmxop's (mxop_dtype_info over codes 0, 1, ... until it
refuses one): each code's short name ("f32"), framework name ("float32":
NumPy's dtype.name, torch's dtype less "torch.") and element size.  They are
filled in place when libmxop is loaded (the first Client loads it; a lookup
made before that loads it then), so `import mxop` needs no library and the
dicts imported elsewhere are the ones filled.  Only native byte order maps;
arrays in another are converted by the caller.  This module imports neither
torch nor mxop.torch (which builds its own table from CODE_OF_FRAMEWORK_NAME).
"""

import ctypes

import numpy as np

from . import _lib
from .errors import InvalidArgument

NAMES = []  # code -> short name ("f32")
FRAMEWORK_NAMES = []  # code -> framework name ("float32")
SIZES = []  # code -> element size in bytes
NUMPY_BY_CODE = []  # code -> NumPy dtype, or None (bf16 has none)
NUMPY_OF = {}  # code -> NumPy dtype (codes NumPy has)
CODE_OF_NUMPY = {}  # NumPy dtype -> code
CODE_OF_NAME = {}  # short name -> code
CODE_OF_FRAMEWORK_NAME = {}  # framework name -> code
_filled = []  # what is told when the tables are filled (mxop.torch, mxop.jax)


def on_fill(fn):
    """fn() is called once the tables are filled (now, if they are)."""
    _filled.append(fn)
    if NAMES:
        fn()


def _fill(dll):
    if NAMES:
        return
    short, fw, size = ctypes.c_char_p(), ctypes.c_char_p(), ctypes.c_size_t()
    code = 0
    while dll.mxop_dtype_info(code, ctypes.byref(short), ctypes.byref(fw),
                              ctypes.byref(size)) == 0:
        s, f = short.value.decode(), fw.value.decode()
        try:
            d = np.dtype(f)
        except TypeError:
            d = None  # bfloat16: NumPy has none
        if d is not None and d.isbuiltin != 1:
            d = None  # another library's (ml_dtypes' bfloat16, once jax is imported)
        SIZES.append(size.value)
        FRAMEWORK_NAMES.append(f)
        NUMPY_BY_CODE.append(d)
        CODE_OF_NAME[s] = code
        CODE_OF_FRAMEWORK_NAME[f] = code
        if d is not None:
            NUMPY_OF[code] = d
            CODE_OF_NUMPY[d] = code
        NAMES.append(s)
        code += 1
    for fn in list(_filled):
        fn()


_lib.on_load(_fill)


def count():
    """How many dtypes libmxop has (loading it if need be)."""
    if not NAMES:
        _lib.lib.load()
    return len(NAMES)


def dtype_code(dtype):
    """The mxop dtype number of a NumPy dtype, an mxop name ("f32") or a number."""
    n = count()
    if isinstance(dtype, int) and not isinstance(dtype, bool):
        if 0 <= dtype < n:
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
        raise InvalidArgument("dtype %r has no mxop equivalent (%s)"
                              % (dtype, ", ".join(NAMES[c] for c in sorted(NUMPY_OF))))
    return code


def numpy_dtype(code):
    """The NumPy dtype of an mxop dtype number (bf16 has none)."""
    n = count()
    d = NUMPY_OF.get(code)
    if d is None:
        raise InvalidArgument("mxop dtype %s has no NumPy equivalent"
                              % (NAMES[code] if isinstance(code, int) and 0 <= code < n
                                 else code))
    return d


def spec_of(x):
    """(mxop dtype, shape) of an array, a tensor or a (shape, dtype) pair."""
    if isinstance(x, tuple) and len(x) == 2 and not hasattr(x, "shape"):
        shape, dtype = x
        if isinstance(shape, int):
            shape = (shape,)
        return dtype_code(dtype), tuple(int(d) for d in shape)
    if hasattr(x, "dtype") and hasattr(x, "shape") and not isinstance(x, np.ndarray):
        count()
        name = str(x.dtype)  # a tensor's: "torch.float32"
        code = CODE_OF_FRAMEWORK_NAME.get(name[6:]) if name.startswith("torch.") else None
        if code is None:
            raise InvalidArgument("dtype %s has no mxop equivalent" % name)
        return code, tuple(x.shape)
    x = np.asarray(x)
    return dtype_code(x.dtype), tuple(x.shape)
