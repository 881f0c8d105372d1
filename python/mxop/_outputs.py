"""Which functions allocate and free op outputs: libmxop's mxop_array_alloc
and mxop_array_free, or mxop.allocator's stand-ins once it was first
enabled (an output may then be a shared-heap block).

One owner writes it (mxop.allocator, through set()); the call paths
(client.py's ctypes path, _fast.py's C call path, _torch_library.py's C++
kernels) read it, and those that hand the addresses to C once are told of a
change through subscribe().  It imports nothing of mxop's, so none of them
imports another for it.
"""
import ctypes

_pair = None  # (alloc, free) addresses, or None: libmxop's own
_ctypes = None  # the same as ctypes functions, for client.py's calls
_listeners = []

_ALLOC = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_int32, ctypes.c_int32,
                          ctypes.c_void_p, ctypes.c_void_p)
_FREE = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)


def addresses():
    """(alloc, free) addresses, or None while libmxop's own serve."""
    return _pair


def functions():
    """(alloc, free) as ctypes functions, or None while libmxop's own serve."""
    return _ctypes


def subscribe(fn):
    """fn(alloc, free) is called at each set() from now on."""
    _listeners.append(fn)


def set(alloc, free):  # noqa: A001 (the module's one writer)
    """Makes (alloc, free) the output functions and tells every subscriber."""
    global _pair, _ctypes
    _pair = (alloc, free)
    _ctypes = (_ALLOC(alloc), _FREE(free))
    for fn in list(_listeners):
        fn(alloc, free)
