"""The C call path (_fastcall.c), when it is there.

The extension is looked for next to this package (an installed copy) and
then in the build tree ($MXOP_BUILD_DIR, else the source tree's build/,
as python/_fastcall.so).  MXOP_NO_FASTCALL=1 leaves it out: every call then
takes the ctypes path, which stays complete on its own.

It is loaded on first use by a Client (libmxop is loaded by then) and
handed libmxop's functions as addresses from the ctypes library, so that
both paths use the one libmxop of the process.
"""

import ctypes
import importlib.machinery
import importlib.util
import os

from . import _dtypes, _lib

_state = {"mod": None, "tried": False, "torch": None}

# What the call paths use: None until the first Client is made, then the
# module, or False when it is missing or disabled (every call then takes
# the ctypes path).  The first Client sets it; mxop.bench sets False to
# measure the ctypes path.
fc = None


def _find():
    try:
        from . import _fastcall  # an installed package carries it beside itself

        return _fastcall
    except ImportError:
        pass
    path = os.path.join(_lib.build_dir(), "python", "_fastcall.so")
    if not os.path.exists(path):
        return None
    loader = importlib.machinery.ExtensionFileLoader("mxop._fastcall", path)
    spec = importlib.util.spec_from_file_location("mxop._fastcall", path, loader=loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


def _addr(fn):
    return ctypes.cast(fn, ctypes.c_void_p).value


def load():
    """The initialised extension, or None (disabled, not built, or unusable)."""
    if _state["tried"]:
        return _state["mod"]
    _state["tried"] = True
    if os.environ.get("MXOP_NO_FASTCALL", "") not in ("", "0"):
        return None
    try:
        mod = _find()
        if mod is None:
            return None
        lib = _lib.lib
        _dtypes.count()  # the tables filled (libmxop is loaded by now)
        descrs = list(_dtypes.NUMPY_BY_CODE)
        # mxop_array_alloc gives shared-heap outputs itself while
        # mxop.allocator has them on; mxop_array_free frees either kind.
        mod.init(_addr(lib.mxop_forward), _addr(lib.mxop_backward),
                 _addr(lib.mxop_array_alloc), _addr(lib.mxop_array_free), descrs)
        if _state["torch"] is not None:
            mod.init_torch(*_state["torch"])
    except Exception:  # a stale or foreign build: the ctypes path does everything
        return None
    _state["mod"] = mod
    return mod


def set_torch(*args):
    """mxop.torch's part (Tensor, from_numpy, strided, codes, settle, inflight,
    is_grad_enabled, tracing_state, storage_region)."""
    _state["torch"] = args
    if _state["mod"] is not None:
        _state["mod"].init_torch(*args)
