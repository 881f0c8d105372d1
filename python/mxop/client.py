"""Clients: one session with mxop-serverd each (the NumPy layer's entry point).

A Client's ops run on arrays that travel as (region, offset, dtype, shape):

  - arrays the client allocated (Client.empty / zeros / asarray, and every
    op output) live in the client's shared-memory arena and pass without a
    copy;
  - arrays inside any other region registered with the client (a PyTorch
    storage after share_memory_(), a region from Client.region_create) pass
    without a copy too;
  - anything else is staged: the C library copies it into its staging
    region for the call (one copy, counted in Stats.staged_bytes).

An op output is a NumPy array viewing the arena block: no copy.  The block
is returned to the arena when the last array viewing it is gone.

The parts live in their own modules: the session here; its memory in
_memory.py (ClientMemory, a base of Client; Block, Region); ops and their
calls in _op.py; attributes in _attrs.py; dtypes in _dtypes.py; call
records in _records.py.  This module re-exports their public names.
"""

import ctypes
import os
import weakref

from . import _fast
from ._attrs import AttrDecl  # noqa: F401 - re-exported
from ._dtypes import dtype_code, numpy_dtype  # noqa: F401 - re-exported
from ._lib import lib, MxopOpInfo, MxopStats
from ._memory import Block, ClientMemory, Region, block_of  # noqa: F401 - re-exported
from ._op import BoundOp, Library, Op, State, states_of  # noqa: F401 - re-exported
from ._records import MAX_DIMS, milliseconds  # noqa: F401 - re-exported
from .errors import make_error, Disconnected

# The C++ kernels of torch.ops (_torch_library's hooks) once they are loaded:
# told of each session's worker and close (use_torchops).
_tops = None

# The key of a client's __dict__ holding its worker's pid once known (0:
# unknown, -1: not to be asked), for Ctrl-C: _fastcall.c reads it there.
WORKER_PID_KEY = "_wpid"


def use_torchops(hooks):
    """Makes `hooks` (wpid(c, pid), closing(h), release(h)) the
    C++ kernels' view of every client; None: there are none."""
    global _tops
    _tops = hooks


def torchops():
    """The hooks use_torchops() was given, or None."""
    return _tops


class Stats:
    """A snapshot of mxop_stats_t."""

    __slots__ = [f for f, _ in MxopStats._fields_]

    def __init__(self, st):
        for f in self.__slots__:
            setattr(self, f, getattr(st, f))

    def _asdict(self):
        return {f: getattr(self, f) for f in self.__slots__}

    def __repr__(self):
        return "Stats(%s)" % ", ".join("%s=%s" % kv for kv in self._asdict().items())


class Client(ClientMemory):
    """One session with mxop-serverd.  Use mxop.connect() to make one."""

    def __init__(self, handle, path, daemon=None):
        self._h = handle
        self.path = path
        self.daemon = daemon
        self._ops = {}
        self._close_pending = False
        self._forked = False  # made before os.fork(), in the child
        self._init_memory()
        _clients.add(self)
        if _fast.fc is None:
            _fast.fc = _fast.load() or False

    # ---- lifetime ---------------------------------------------------------

    def close(self):
        """Ends the session.  Arrays still viewing its memory keep it mapped:
        the session then ends when the last of them is gone."""
        if not self._h or self._close_pending:
            return
        self._close_pending = True
        for hook in close_hooks:
            hook(self)
        if _tops is not None:
            _tops.closing(self._h)
        for st in list(states_of(self)):
            st.close()
        if self._live == 0:
            self._finish_close()

    def _finish_close(self):
        h, self._h = self._h, None
        # Tensors the C++ kernels made may still use the session: the last closes it.
        if h and not (_tops is not None and _tops.release(h)):
            lib.mxop_close(h)
        _clients.discard(self)

    @property
    def closed(self):
        return not self._h or self._close_pending

    @property
    def handle(self):
        """The mxop_client_t pointer (an integer), or None once closed."""
        return self._h

    @property
    def forked(self):
        """True in a forked child for a client its parent made (unusable here)."""
        return self._forked

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return "<mxop.Client %r%s>" % (self.path, " closed" if self.closed else "")

    def check_handle(self):
        """The mxop_client_t pointer; raises Disconnected once closed (or
        in a forked child)."""
        if not self._h or self._close_pending:
            if self._forked:
                raise Disconnected(_FORKED_MSG % (self.path,))
            raise Disconnected("the client is closed")
        return self._h

    def error(self, rc):
        """The exception of a failed call's rc, with the session's last message."""
        msg = lib.mxop_last_error(self._h) if self._h else b""
        return make_error(rc, msg.decode(errors="replace") if msg else "")

    def check(self, rc):
        """Raises error(rc) if rc < 0."""
        if rc < 0:
            raise self.error(rc)

    def set_worker_pid(self, pid):
        """The session's worker pid, for Ctrl-C (0: unknown; -1: do not ask):
        kept here and told to the C++ kernels."""
        self.__dict__[WORKER_PID_KEY] = pid
        if _tops is not None:
            _tops.wpid(self, pid)

    # _fastcall.c calls error(rc) by this name; _handle for older callers.
    _handle = check_handle
    _error = error

    # ---- settings, libraries, ops -------------------------------------------

    def set_timeout(self, seconds):
        """The default deadline of a call, in seconds."""
        self.check(lib.mxop_set_timeout(self.check_handle(), milliseconds(seconds, "timeout")))

    def load(self, name):
        """Loads the library `name` (relative to the daemon's plugin directory).

        Returns a Library whose attributes are its ops."""
        h = self.check_handle()
        before = set(self._op_names())
        self.check(lib.mxop_load_library(h, name.encode()))
        ops = {}
        for opname, info_lib in self._op_names().items():
            if opname not in before or info_lib == name:
                ops[opname] = self.op(opname)
        return Library(name, ops)

    def _op_names(self):
        h = self.check_handle()
        out = {}
        info = MxopOpInfo()
        for i in range(lib.mxop_op_count(h)):
            p = lib.mxop_op_at(h, i)
            if p and lib.mxop_op_info(p, ctypes.addressof(info)) == 0:
                out[info.name.decode()] = (info.library or b"").decode()
        return out

    def op(self, name):
        """The loaded op `name` (raises UnknownOp)."""
        op = self._ops.get(name)
        if op is not None:
            return op
        h = self.check_handle()
        p = ctypes.c_void_p()
        self.check(lib.mxop_op_find(h, name.encode(), ctypes.byref(p)))
        info = MxopOpInfo()
        self.check(lib.mxop_op_info(p.value, ctypes.addressof(info)))
        op = Op(self, p.value, info)
        self._ops[name] = op
        return op

    def ops(self):
        """Every loaded op, by name."""
        return {n: self.op(n) for n in self._op_names()}

    def __getattr__(self, name):
        # client.relu(x): the loaded op of that name.
        if name.startswith("_"):
            raise AttributeError(name)
        try:
            return self.op(name)
        except Exception:
            raise AttributeError("%r: no attribute or loaded op %r" % (self, name)) from None

    # ---- statistics ------------------------------------------------------

    def stats(self):
        st = MxopStats()
        self.check(lib.mxop_stats(self.check_handle(), ctypes.addressof(st)))
        return Stats(st)

    def shutdown_daemon(self):
        """Asks the daemon to shut down; the client is then unusable."""
        self.check(lib.mxop_shutdown_daemon(self.check_handle()))


_clients = weakref.WeakSet()
# Called with each Client as it closes (mxop.jax forgets its call records).
close_hooks = []

# Why a client inherited through os.fork() refuses calls, and the remedy.
_FORKED_MSG = ("this client (socket %s) was made before os.fork(); a forked child cannot "
               "use its parent's session: call mxop.connect() in the child (e.g. in a "
               "DataLoader worker_init_fn), use the 'spawn' start method, or use "
               "mxop.torch ops, which reconnect by themselves")


def _after_fork_in_child():
    # A forked child shares the parent's sockets: using (or closing) the
    # parent's sessions from here would corrupt them.  The child's copies
    # are disowned; it may connect afresh.
    for c in list(_clients):
        c._h = None
        c._forked = True
    _clients.clear()


def live_clients():
    """The clients of this process that are open (or closing)."""
    return list(_clients)


os.register_at_fork(after_in_child=_after_fork_in_child)
