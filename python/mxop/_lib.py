"""ctypes bindings of libmxop (include/mxop/client.h).

Every struct here mirrors its C declaration field for field; the test
suite compiles a small C program printing sizeof and offsetof of each and
compares them with ctypes.sizeof / offsetof here, so a change in the header
that is not mirrored here fails the tests instead of corrupting memory.

Every function gets argtypes and restype.  Pointers to opaque handles
(mxop_client_t *, const mxop_op_t *) and to buffers the hot path prebuilds
are declared c_void_p, so that callers pass plain integers (addresses):
that is the cheapest thing ctypes can convert.
"""

import ctypes
import ctypes.util
import os
import struct

from .errors import LIB_NOT_FOUND, LibraryNotFound, use_library_words, use_loader

MAX_DIMS = 8
MAX_TENSORS = 64
REGION_HEAP = 0

# enum mxop_req.
REQ_WRITE, REQ_ADD, REQ_NULL = 0, 1, 2


class MxopArray(ctypes.Structure):
    """mxop_array_t."""

    _fields_ = [
        ("data", ctypes.c_void_p),
        ("dtype", ctypes.c_int32),
        ("ndim", ctypes.c_int32),
        ("shape", ctypes.c_int64 * MAX_DIMS),
        ("region", ctypes.c_uint32),
        ("offset", ctypes.c_uint64),
        ("nbytes", ctypes.c_size_t),
        ("req", ctypes.c_int32),
    ]


class MxopShape(ctypes.Structure):
    """mxop_shape_t."""

    _fields_ = [("ndim", ctypes.c_int32), ("dims", ctypes.c_int64 * MAX_DIMS)]


class MxopCall(ctypes.Structure):
    """mxop_call_t."""

    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("attrs", ctypes.c_void_p),  # const char *const *
        ("state", ctypes.c_uint64),
        ("timeout_ms", ctypes.c_int32),
        ("seed", ctypes.c_uint64),
        ("in_strides", ctypes.c_void_p),  # const int64_t *const *
        ("out_strides", ctypes.c_void_p),
    ]

# enum mxop_op_flags
OP_STRIDED = 1
OP_MXNET = 2


class MxopOpInfo(ctypes.Structure):
    """mxop_op_info_t."""

    _fields_ = [
        ("name", ctypes.c_char_p),
        ("description", ctypes.c_char_p),
        ("library", ctypes.c_char_p),
        ("num_inputs", ctypes.c_int32),
        ("min_inputs", ctypes.c_int32),
        ("num_outputs", ctypes.c_int32),
        ("mutated_inputs", ctypes.c_uint64),
        ("has_backward", ctypes.c_int),
        ("stateful", ctypes.c_int),
    ]


class MxopAttrInfo(ctypes.Structure):
    """mxop_attr_info_t."""

    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("type", ctypes.c_int32),
        ("name", ctypes.c_char_p),
        ("required", ctypes.c_int32),
        ("default_value", ctypes.c_char_p),
        ("doc", ctypes.c_char_p),
    ]


# enum mxop_attr_type (types.h) as the names Op.attrs reports.
ATTR_TYPE_NAMES = {1: "int", 2: "float", 3: "bool", 4: "string", 5: "int_list",
                   6: "float_list"}


class MxopOpInfoV2(ctypes.Structure):
    """mxop_op_info_v2_t."""

    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("num_inputs", ctypes.c_int32),
        ("min_inputs", ctypes.c_int32),
        ("num_outputs", ctypes.c_int32),
        ("name", ctypes.c_char_p),
        ("description", ctypes.c_char_p),
        ("library", ctypes.c_char_p),
        ("mutated_inputs", ctypes.c_uint64),
        ("has_backward", ctypes.c_int32),
        ("stateful", ctypes.c_int32),
        ("flags", ctypes.c_uint32),
        ("num_attrs", ctypes.c_int32),
        ("dynamic_outputs", ctypes.c_uint64),
    ]


class MxopStatsV2(ctypes.Structure):
    """mxop_stats_v2_t."""

    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("worker_pid", ctypes.c_uint32),
        ("daemon_sessions", ctypes.c_uint32),
        ("calls", ctypes.c_uint64),
        ("errors", ctypes.c_uint64),
        ("worker_restarts", ctypes.c_uint64),
        ("staged_bytes", ctypes.c_uint64),
        ("regions", ctypes.c_uint64),
        ("region_bytes", ctypes.c_uint64),
        ("scratch_bytes", ctypes.c_uint64),
        ("confined", ctypes.c_uint32),
    ]


class MxopStats(ctypes.Structure):
    """mxop_stats_t."""

    _fields_ = [
        ("calls", ctypes.c_uint64),
        ("errors", ctypes.c_uint64),
        ("worker_restarts", ctypes.c_uint64),
        ("staged_bytes", ctypes.c_uint64),
        ("regions", ctypes.c_uint64),
        ("region_bytes", ctypes.c_uint64),
        ("worker_pid", ctypes.c_uint32),
        ("daemon_sessions", ctypes.c_uint32),
    ]


class MxopConnectOpts(ctypes.Structure):
    """mxop_connect_opts_t."""

    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("timeout_ms", ctypes.c_int32),
        ("connect_timeout_ms", ctypes.c_int32),
        ("client_name", ctypes.c_char_p),
        ("data_path", ctypes.c_int32),  # enum mxop_data_path; 0: $MXOP_DATA_PATH or shm
        ("max_sessions", ctypes.c_int32),  # sessions in flight at once; 0/1: one
        ("reconnect", ctypes.c_int32),  # enum mxop_reconnect; 0: on unless MXOP_RECONNECT=0
    ]


# The C structs above, as (name, ctypes class) for the layout test.
STRUCTS = (
    ("mxop_array_t", MxopArray),
    ("mxop_shape_t", MxopShape),
    ("mxop_call_t", MxopCall),
    ("mxop_op_info_t", MxopOpInfo),
    ("mxop_stats_t", MxopStats),
    ("mxop_attr_info_t", MxopAttrInfo),
    ("mxop_op_info_v2_t", MxopOpInfoV2),
    ("mxop_stats_v2_t", MxopStatsV2),
    ("mxop_connect_opts_t", MxopConnectOpts),
)

# The hot path writes whole mxop_array_t records with one pack_into call
# (far cheaper than a dozen ctypes attribute stores).  Native alignment
# ('@') lays the fields out as the C compiler does; the trailing pad makes
# the record as long as sizeof(mxop_array_t).  Fields: data, dtype, ndim,
# shape[8], region, offset, nbytes, req.
ARRAY_STRUCT = struct.Struct("@Pii%dqIQNi" % MAX_DIMS)
ARRAY_SIZE = ctypes.sizeof(MxopArray)
if ARRAY_STRUCT.size < ARRAY_SIZE:
    ARRAY_STRUCT = struct.Struct(
        "@Pii%dqIQNi%dx" % (MAX_DIMS, ARRAY_SIZE - ARRAY_STRUCT.size)
    )
assert ARRAY_STRUCT.size == ARRAY_SIZE, "mxop_array_t packing does not match ctypes"
# Offsets of the fields the Python layer reads back after mxop_array_alloc.
OFF_DATA = MxopArray.data.offset
OFF_REGION = MxopArray.region.offset
OFF_OFFSET = MxopArray.offset.offset


_P = ctypes.c_void_p
_I32 = ctypes.c_int32
_INT = ctypes.c_int
_CP = ctypes.c_char_p

# name: (restype, argtypes)
_PROTOTYPES = {
    "mxop_err_name": (_CP, [_INT]),
    "mxop_strerror": (_CP, [_INT]),
    "mxop_err_code": (_INT, [_CP]),
    "mxop_dtype_info": (_INT, [_I32, _P, _P, _P]),
    "mxop_shared_outputs": (_INT, [_INT]),
    "mxop_connect": (_INT, [_CP, _P, _P]),
    "mxop_connect_error": (_CP, []),
    "mxop_close": (None, [_P]),
    "mxop_last_error": (_CP, [_P]),
    "mxop_set_timeout": (_INT, [_P, _I32]),
    "mxop_load_library": (_INT, [_P, _CP]),
    "mxop_op_find": (_INT, [_P, _CP, _P]),
    "mxop_op_count": (_INT, [_P]),
    "mxop_op_at": (_P, [_P, _INT]),
    "mxop_op_info": (_INT, [_P, _P]),
    "mxop_op_attr_count": (_INT, [_P]),
    "mxop_op_flags": (ctypes.c_uint32, [_P]),
    "mxop_op_dynamic_outputs": (ctypes.c_uint64, [_P]),
    "mxop_op_info_v2": (_INT, [_P, _P]),
    "mxop_stats_v2": (_INT, [_P, _P]),
    "mxop_op_attr": (_INT, [_P, _INT, _P]),
    "mxop_array_alloc": (_INT, [_P, _I32, _I32, _P, _P]),
    "mxop_array_free": (None, [_P, _P]),
    "mxop_region_create": (_INT, [_P, ctypes.c_size_t, _P, _P]),
    "mxop_region_register_fd": (_INT, [_P, _INT, ctypes.c_size_t, _P, _P]),
    "mxop_region_register_fd_at": (_INT, [_P, _INT, ctypes.c_size_t, _P, _P]),
    "mxop_region_lookup": (_INT, [_P, _P, ctypes.c_size_t, _P, _P]),
    "mxop_region_release": (_INT, [_P, ctypes.c_uint32]),
    "mxop_region_set_read_only": (_INT, [_P, ctypes.c_uint32, _INT]),
    "mxop_array_view": (_INT, [_P, ctypes.c_uint32, ctypes.c_uint64, _I32, _I32, _P, _P]),
    "mxop_forward": (_INT, [_P, _P, _P, _P, _INT, _P, _INT]),
    "mxop_backward": (_INT, [_P, _P, _P, _P, _INT, _P, _INT]),
    "mxop_infer": (_INT, [_P, _P, _P, _INT, _P, _P, _INT, _P, _P]),
    "mxop_state_create": (_INT, [_P, _P, _P, _INT, _P, _P, _P]),
    "mxop_state_destroy": (_INT, [_P, ctypes.c_uint64]),
    "mxop_stats": (_INT, [_P, _P]),
    "mxop_shutdown_daemon": (_INT, [_P]),
}


def _package_build_dir():
    """The build tree next to this package when it runs from the source tree."""
    here = os.path.dirname(os.path.abspath(__file__))
    return os.path.normpath(os.path.join(here, "..", "..", "build"))


def bundled_dir():
    """This package's own directory when it carries the programs beside itself
    (a pip-installed wheel: bin/, lib/libmxop.so, plugins/), else None."""
    here = os.path.dirname(os.path.abspath(__file__))
    return here if os.path.exists(os.path.join(here, "bin", "mxop-serverd")) else None


def build_dir():
    """Where the programs, libmxop and plugins are: beside the package (a
    wheel), else $MXOP_BUILD_DIR, else the source tree's build/ (which may
    not exist)."""
    return bundled_dir() or os.environ.get("MXOP_BUILD_DIR") or _package_build_dir()


def find_library():
    """Path of libmxop.so: $MXOP_LIB, beside the package, the build tree, then the system's."""
    env = os.environ.get("MXOP_LIB")
    if env:
        return env
    for d in (bundled_dir(), os.environ.get("MXOP_BUILD_DIR"), _package_build_dir()):
        if d:
            p = os.path.join(d, "lib", "libmxop.so")
            if os.path.exists(p):
                return p
    return ctypes.util.find_library("mxop")


# Called with the library once it is loaded (the dtype tables, _dtypes.py).
_loaded_hooks = []


def on_load(fn):
    """fn(dll) is called when libmxop is loaded (now, if it is)."""
    _loaded_hooks.append(fn)
    if lib._dll is not None:
        fn(lib._dll)


class _Lib:
    """libmxop, loaded on first use so that `import mxop` never fails."""

    def __init__(self):
        self._dll = None
        self.path = None

    def load(self):
        if self._dll is not None:
            return self._dll
        path = find_library()
        if not path:
            raise LibraryNotFound(
                LIB_NOT_FOUND,
                "libmxop.so not found: set MXOP_LIB, build the tree (make), or install it",
            )
        try:
            dll = ctypes.CDLL(path)
        except OSError as e:
            raise LibraryNotFound(LIB_NOT_FOUND, "cannot load %s: %s" % (path, e)) from None
        for name, (res, args) in _PROTOTYPES.items():
            fn = getattr(dll, name)
            fn.restype = res
            fn.argtypes = args
        self._dll = dll
        self.path = path
        use_library_words(dll.mxop_err_name, dll.mxop_strerror, dll.mxop_err_code)
        for fn in list(_loaded_hooks):
            fn(dll)
        return dll

    def __getattr__(self, name):
        fn = getattr(self.load(), name)
        # Cache the function on the instance: later lookups skip __getattr__.
        setattr(self, name, fn)
        return fn


lib = _Lib()
# The error classes learn libmxop's codes from it, loading it if asked first.
use_loader(lib.load)
