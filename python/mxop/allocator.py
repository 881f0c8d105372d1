"""Tensors in mxop shared memory from the start (opt-in).

    import mxop.allocator
    mxop.allocator.enable()       # or MXOP_ALLOCATOR=1 before `import mxop`
    x = torch.randn(1 << 18)      # lives in a shared-heap block
    y = torch.ops.mxop.relu(x)    # x passes by reference: no staging copy

An op input in ordinary heap memory is copied into shared memory for every
call (libmxop's staging).  With the allocator on, the memory the program
already has is shared memory:

  - PyTorch: torch's CPU allocator (c10::SetCPUAllocator, _torchalloc.cpp)
    puts every allocation of at least mxop_shared_min_bytes() (64 KiB, env
    MXOP_ALLOCATOR_MIN_KB) in a block of libmxop's shared heap;
  - NumPy: the NEP 49 memory handler (_npalloc.c) does the same for array
    data.  NumPy's handler is a context variable: enable() sets it for the
    calling thread's context only (threads already running keep theirs;
    call enable() in each, or before starting them where contexts are
    copied);
  - op outputs (every call path) come from libmxop's mxop_array_alloc,
    which gives warm shared-heap blocks while mxop_shared_outputs is on: a
    freed block already registered with the session, so its pages are warm
    here and in the worker (mxop_array_free frees either kind).

libmxop passes a tensor in a shared-heap block by reference: it registers
the block with the session on first use (the worker then sees that block,
and only blocks that calls of its session passed).  Small allocations stay
on the ordinary heap.  Every allocation frees through its own deleter, so
tensors made before enable(), after it and after disable() all work and
free correctly.  In a forked child the blocks are the parent's memory,
copy-on-write (the child's writes never reach the parent), and the
allocator keeps working.
"""

import ctypes
import importlib.machinery
import importlib.util
import os
import sys
import threading
import warnings

from . import _lib
from .errors import MxopError, NotSupported

__all__ = ["enable", "disable", "enabled", "stats", "contains"]

_lock = threading.RLock()
# "np": the _npalloc module (NumPy's handler), "torch": _torchalloc.so
# (ctypes), "outputs": op outputs go to shared-heap blocks.
_state = {"np": None, "torch": None, "outputs": False}


class _SharedStats(ctypes.Structure):
    """mxop_shared_stats_t (include/mxop/client.h)."""

    _fields_ = [(n, ctypes.c_uint64) for n in (
        "blocks_live", "bytes_live", "blocks_cached", "bytes_cached", "registrations",
        "revocations", "reused_warm")]


_PROTOTYPES = {
    "mxop_shared_alloc": (ctypes.c_void_p, [ctypes.c_size_t]),
    "mxop_shared_free": (ctypes.c_int, [ctypes.c_void_p]),
    "mxop_shared_contains": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_size_t]),
    "mxop_shared_alloc_output": (ctypes.c_void_p, [ctypes.c_void_p, ctypes.c_size_t]),
    "mxop_shared_min_bytes": (ctypes.c_size_t, []),
    "mxop_shared_stats": (None, [ctypes.c_void_p]),
    "mxop_shared_outputs": (ctypes.c_int, [ctypes.c_int]),
}


def _heap():
    """libmxop with the shared heap's functions declared."""
    dll = _lib.lib.load()
    for name, (res, args) in _PROTOTYPES.items():
        try:
            fn = getattr(dll, name)
        except AttributeError:
            raise NotSupported("%s has no shared heap (%s): build libmxop again"
                               % (_lib.lib.path, name)) from None
        fn.restype = res
        fn.argtypes = args
    return dll


def _addr(fn):
    return ctypes.cast(fn, ctypes.c_void_p).value


def _find(name):
    """An extension built beside the package (a wheel) or in the build tree."""
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), name)
    if os.path.exists(here):
        return here
    p = os.path.join(_lib.build_dir(), "python", name)
    return p if os.path.exists(p) else None


def _np_module():
    if _state["np"] is not None:
        return _state["np"]
    dll = _heap()
    try:
        from . import _npalloc as mod  # an installed package carries it beside itself
    except ImportError:
        path = _find("_npalloc.so")
        if path is None:
            raise NotSupported("mxop.allocator: _npalloc.so not found (built by make "
                               "python, against the interpreter's NumPy)") from None
        loader = importlib.machinery.ExtensionFileLoader("mxop._npalloc", path)
        spec = importlib.util.spec_from_file_location("mxop._npalloc", path, loader=loader)
        mod = importlib.util.module_from_spec(spec)
        loader.exec_module(mod)
    mod.init(_addr(dll.mxop_shared_alloc), _addr(dll.mxop_shared_free),
             _addr(dll.mxop_shared_contains), _addr(dll.mxop_shared_min_bytes),
             _addr(dll.mxop_shared_alloc_output), _addr(dll.mxop_array_alloc),
             _addr(dll.mxop_array_free))
    _state["np"] = mod
    return mod


def _torch_dll():
    if _state["torch"] is not None:
        return _state["torch"]
    dll = _heap()
    import torch  # noqa: F401 - loads libc10, which the library resolves against

    path = _find("_torchalloc.so")
    if path is None:
        raise NotSupported("mxop.allocator: _torchalloc.so not found (built by make "
                           "python, against the interpreter's torch)")
    d = ctypes.CDLL(path)
    vp = ctypes.c_void_p
    d.mxop_torchalloc_init.argtypes = [vp, vp, vp]
    d.mxop_torchalloc_init.restype = None
    d.mxop_torchalloc_enable.restype = ctypes.c_int
    d.mxop_torchalloc_disable.restype = None
    d.mxop_torchalloc_enabled.restype = ctypes.c_int
    d.mxop_torchalloc_counts.argtypes = [vp, vp]
    d.mxop_torchalloc_counts.restype = None
    d.mxop_torchalloc_init(_addr(dll.mxop_shared_alloc), _addr(dll.mxop_shared_free),
                           _addr(dll.mxop_shared_min_bytes))
    _state["torch"] = d
    return d


def _torch_wanted(torch):
    """torch=True: torch's allocator if torch is installed."""
    if not torch:
        return False
    return "torch" in sys.modules or importlib.util.find_spec("torch") is not None


def enable(torch=True, numpy=True):
    """Turns the allocator on: torch's CPU allocator (torch=True, when torch
    is installed: it is imported), NumPy's handler of the calling context
    (numpy=True), and op outputs in warm shared-heap blocks.  A second call
    is a no-op for what is on already.  Raises NotSupported when libmxop or
    the extensions lack what it needs (nothing is changed then)."""
    with _lock:
        mod = _np_module()
        want_torch = _torch_wanted(torch)
        d = _torch_dll() if want_torch else None
        if d is not None and d.mxop_torchalloc_enable() != 0:
            raise NotSupported("mxop.allocator: torch kept its own CPU allocator "
                               "(c10::SetCPUAllocator did not take mxop's)")
        if numpy:
            mod.enable()
        _heap().mxop_shared_outputs(1)
        _state["outputs"] = True


def disable():
    """Turns the allocator off: torch's previous CPU allocator back, NumPy's
    previous handler back in the calling context, outputs in the arena.
    Tensors and arrays made while it was on stay valid and free normally."""
    with _lock:
        mod = _state["np"]
        if mod is None:
            return
        d = _state["torch"]
        if d is not None:
            d.mxop_torchalloc_disable()
        mod.disable()
        _heap().mxop_shared_outputs(0)
        _state["outputs"] = False


def enabled():
    """True while any part is on (torch's allocator, NumPy's handler in this
    context, or the outputs)."""
    mod = _state["np"]
    if mod is None:
        return False
    d = _state["torch"]
    return bool(_state["outputs"] or mod.enabled() or
                (d is not None and d.mxop_torchalloc_enabled()))


def stats():
    """The shared heap's counters (mxop_shared_stats) with what the hooks
    sent there: a dict."""
    dll = _heap()
    st = _SharedStats()
    dll.mxop_shared_stats(ctypes.byref(st))
    out = {n: getattr(st, n) for n, _ in _SharedStats._fields_}
    out["min_bytes"] = dll.mxop_shared_min_bytes()
    mod = _state["np"]
    np_shared, np_fallback, outputs = mod.counts() if mod is not None else (0, 0, 0)
    t_shared = ctypes.c_uint64()
    t_fallback = ctypes.c_uint64()
    d = _state["torch"]
    if d is not None:
        d.mxop_torchalloc_counts(ctypes.byref(t_shared), ctypes.byref(t_fallback))
    out.update(torch_enabled=bool(d is not None and d.mxop_torchalloc_enabled()),
               numpy_enabled=bool(mod is not None and mod.enabled()),
               torch_allocs=t_shared.value, torch_fallbacks=t_fallback.value,
               numpy_allocs=np_shared, numpy_fallbacks=np_fallback, outputs=outputs)
    return out


def contains(ptr, nbytes=1):
    """True when [ptr, ptr + nbytes) lies inside one live shared-heap block."""
    return bool(_heap().mxop_shared_contains(ptr, nbytes))


def from_environment():
    """MXOP_ALLOCATOR=1 at `import mxop`: enable(), which imports torch when
    it is installed (its start-up cost, paid once).  A failure is a warning:
    the import itself must not fail over an optimisation."""
    if os.environ.get("MXOP_ALLOCATOR", "") not in ("", "0"):
        try:
            enable()
        except (MxopError, OSError, ImportError) as e:
            warnings.warn("mxop: MXOP_ALLOCATOR=1 but the allocator stays off: %s" % e,
                          RuntimeWarning, stacklevel=3)
