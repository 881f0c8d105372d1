"""Ctrl-C during an mxop call from PyTorch.

A call blocks in libmxop (the GIL released) until the worker answers, and
Python runs its SIGINT handler only when the call returns: without help a
KeyboardInterrupt would wait for the op to end, or for the deadline.

So, once armed from the main thread, a wakeup fd (signal.set_wakeup_fd)
tells a helper thread of every signal.  When SIGINT arrives while a call
is in flight, the thread kills that call's worker (SIGKILL): libmxop
returns at once (the worker died), the daemon gives the session a new
worker as after any crash, and the pending SIGINT raises KeyboardInterrupt
as the call returns.  The call is abandoned; the session goes on.

Nothing is armed when the program has its own SIGINT handler or its own
wakeup fd (asyncio, for example): then Ctrl-C behaves as before.

Which worker: libmxop publishes, in a slot the main thread names
(mxop_set_inflight_slot), the pid of the worker running the main thread's
call, whichever session of the client's pool runs it (a sibling's when
another thread holds the client's own).  With an older libmxop the pid
the bindings noted for the client's own session serves instead.
"""

import ctypes
import os
import signal
import threading

# The worker pid of the call in flight (0: none).  One slot: a call that
# blocks the main thread is the one Ctrl-C is meant for.
inflight = [0]
# The C++ kernels' slot (torch.ops calls made without Python), once loaded:
# a function returning the worker pid of their call in flight.
cpp_inflight = None

_state = {"armed": None}  # None: not tried yet; True/False: the outcome


def _watch(fd):
    while True:
        try:
            data = os.read(fd, 64)
        except InterruptedError:
            continue
        except OSError:
            return
        if not data:
            return
        if signal.SIGINT in data:
            if _slot["slot"] is not None:
                pid = _slot["slot"].value
            else:
                pid = inflight[0]
                if not pid and cpp_inflight is not None:
                    pid = cpp_inflight()
            # Only while Ctrl-C means KeyboardInterrupt: a handler installed
            # later may mean to ignore it, and then the call must go on.
            if pid > 0 and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:  # gone already, or not ours to signal
                    pass


def arm():
    """Arms the mechanism (once, from the main thread); True if armed."""
    armed = _state["armed"]
    if armed is not None:
        return armed
    if threading.current_thread() is not threading.main_thread():
        return False  # only the main thread may set the wakeup fd; try again from it
    _state["armed"] = False
    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        return False
    r, w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    os.set_blocking(r, True)
    try:
        old = signal.set_wakeup_fd(w, warn_on_full_buffer=False)
    except (ValueError, OSError):
        os.close(r)
        os.close(w)
        return False
    if old != -1:  # someone else's: give it back
        signal.set_wakeup_fd(old)
        os.close(r)
        os.close(w)
        return False
    _name_slot()
    threading.Thread(target=_watch, args=(r,), name="mxop-sigint", daemon=True).start()
    _state["armed"] = True
    return True


# The main thread's slot in libmxop (None: this libmxop has none).
_slot = {"slot": None}


def _name_slot():
    try:
        from . import _lib

        fn = _lib.lib.mxop_set_inflight_slot
    except Exception:  # an older libmxop
        return
    v = ctypes.c_int32(0)
    fn.restype = None
    fn.argtypes = [ctypes.c_void_p]
    fn(ctypes.addressof(v))
    _slot["slot"] = v


def _after_fork_in_child():
    # The helper thread does not exist in a forked child: disarm there (the
    # child arms its own on its first call from its main thread).
    if _state["armed"]:
        try:
            signal.set_wakeup_fd(-1)
        except (ValueError, OSError):
            pass
    _state["armed"] = None
    inflight[0] = 0


os.register_at_fork(after_in_child=_after_fork_in_child)
