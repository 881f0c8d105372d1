"""mxop: custom deep-learning ops run out of process, from Python.

    import mxop
    c = mxop.connect()              # $MXOP_SOCKET, or a private daemon
    relu = c.load("relu.so").relu
    y = relu(x)                     # x: a NumPy array; y views shared memory
    dx = relu.backward([dy], [x], [y])

mxop.torch makes the same ops PyTorch autograd functions.

Connection: connect(path) talks to the daemon at `path`; without one,
$MXOP_SOCKET; without that, the embedded default: a private mxop-serverd
started for this process (in a private temporary directory, with a plugin
directory from $MXOP_PLUGIN_DIR or copies of the build tree's plugins) and
ended with it.
"""

import atexit
import ctypes
import os

from . import _lib
from . import errors as _errors
from ._daemon import Daemon, embedded as _embedded
from ._lib import lib, MxopConnectOpts
from .client import (Client, Op, BoundOp, State, Library, Region, Stats, dtype_code,
                     numpy_dtype)
from .errors import *  # noqa: F401,F403 - the exception classes are the package's API
from .errors import MxopError, make_error, error_class

__all__ = ["connect", "default_client", "empty", "zeros", "asarray", "err_name", "strerror",
           "build_dir", "Daemon", "Client", "Op", "BoundOp", "State", "Library", "Region",
           "Stats", "dtype_code", "numpy_dtype", "MxopError", "make_error",
           "error_class"] + list(_errors.CLASS_NAMES)

__version__ = "0.1.0"


def __getattr__(name):
    # mxop.F32, mxop.BF16, ...: libmxop's dtype codes by their short names.
    if name.isupper():
        from . import _dtypes

        try:
            _dtypes.count()
        except MxopError:  # no libmxop: no such attribute either
            pass
        code = _dtypes.CODE_OF_NAME.get(name.lower())
        if code is not None:
            return code
    raise AttributeError("module 'mxop' has no attribute %r" % name)


_default = None


# Sessions a Client may use at once by default (mxop_connect_opts_t.max_sessions):
# siblings are opened only when threads call at the same time.
DEFAULT_SESSIONS = 4


def connect(path=None, *, timeout=None, connect_timeout=None, name=None, plugin_dir=None,
            sessions=None):
    """A new Client (one session, one worker).

    path: the daemon's socket (or a Daemon); else $MXOP_SOCKET; else the
    process's private daemon (plugin_dir: its plugin directory, default
    $MXOP_PLUGIN_DIR or copies of the build tree's plugins; with a path or
    $MXOP_SOCKET, plugin_dir is an error: that daemon has its own).
    timeout: default call deadline in seconds; connect_timeout: for the
    handshake.  name: shown in the daemon's log.
    sessions: how many calls from different threads may be in flight at
    once (default 4, or $MXOP_SESSIONS): a call made while another thread's
    call holds the session goes to a sibling session, opened on first need
    (its own worker, the same libraries and memory); 1 disables that.
    """
    global _default
    daemon = None
    if plugin_dir is not None and (path is not None or os.environ.get("MXOP_SOCKET")):
        # plugin_dir is the private daemon's; a running daemon has its own --plugin-dir.
        given = ("path=%r" % (path.socket if isinstance(path, Daemon) else path)
                 if path is not None else "$MXOP_SOCKET=%r" % os.environ["MXOP_SOCKET"])
        raise _errors.InvalidArgument(
            "connect(): plugin_dir=%r is for the private daemon connect() starts when no "
            "socket is given, but %s names a running daemon, which loads from its own "
            "--plugin-dir: leave out plugin_dir, or %s" % (
                plugin_dir, given, "path" if path is not None else "unset MXOP_SOCKET"))
    if isinstance(path, Daemon):
        daemon, path = path, path.socket
    if path is None:
        path = os.environ.get("MXOP_SOCKET") or None
    if path is None:
        daemon = _embedded(plugin_dir)
        path = daemon.socket
    path = os.fspath(path)
    opts = MxopConnectOpts(struct_size=ctypes.sizeof(MxopConnectOpts))
    if timeout is not None:
        opts.timeout_ms = max(1, int(round(timeout * 1000)))
    if connect_timeout is not None:
        opts.connect_timeout_ms = max(1, int(round(connect_timeout * 1000)))
    nm = (name or "python:%d" % os.getpid()).encode()
    opts.client_name = nm
    if sessions is None:
        sessions = int(os.environ.get("MXOP_SESSIONS", "") or DEFAULT_SESSIONS)
    opts.max_sessions = int(sessions)
    h = ctypes.c_void_p()
    rc = lib.mxop_connect(path.encode(), ctypes.addressof(opts), ctypes.byref(h))
    if rc < 0:
        msg = lib.mxop_connect_error()
        raise make_error(rc, "%s (socket %s)" % (msg.decode(errors="replace") if msg else "",
                                                 path))
    c = Client(h.value, path, daemon)
    if _default is None or _default.closed:
        _default = c
    return c


def default_client():
    """The process's default client: the first one connect() made, else a new one."""
    global _default
    if _default is None or _default.closed:
        _default = connect()
    return _default


def empty(shape, dtype="f32", client=None):
    """An uninitialised array in shared memory (zero-copy as an op input)."""
    return (client or default_client()).empty(shape, dtype)


def zeros(shape, dtype="f32", client=None):
    """A zero-filled array in shared memory."""
    return (client or default_client()).zeros(shape, dtype)


def asarray(x, dtype=None, client=None):
    """`x` in shared memory (copied once unless it is there already)."""
    return (client or default_client()).asarray(x, dtype)


def err_name(code):
    """The library's name of an error code ("MXOP_ETIMEOUT")."""
    n = lib.mxop_err_name(code)
    return n.decode() if n else "MXOP_E?"


def strerror(code):
    m = lib.mxop_strerror(code)
    return m.decode() if m else ""


def _close_all():
    # At exit: close every client that has no array still viewing its
    # memory (one that has is left mapped; the process is ending).
    from .client import live_clients

    for c in live_clients():
        try:
            if c.live_blocks == 0:
                c.close()
        except Exception:
            pass


# Registered after _daemon's handler, so it runs before the daemons stop.
atexit.register(_close_all)

# MXOP_ALLOCATOR=1: tensors and arrays in shared memory from the start.
from . import allocator  # noqa: E402 - after the package's names, which it uses

allocator.from_environment()


def build_dir():
    """The build tree the package uses ($MXOP_BUILD_DIR, else ../../build)."""
    return _lib.build_dir()
