"""A call of mxop_forward / mxop_backward from the torch layer, with the
worker's pid in _interrupt.inflight so that Ctrl-C can abandon the call."""

from . import _interrupt
from .client import WORKER_PID_KEY

inflight = _interrupt.inflight


def call(c, fn, *args):
    """fn(*args) (mxop_forward or mxop_backward) with the worker's pid in
    _interrupt.inflight, so that Ctrl-C can abandon the call; raises the
    call's error.  The pid is looked up once per worker (after a failure
    the worker may be a new one)."""
    d = c.__dict__
    inflight[0] = d.get(WORKER_PID_KEY, 0)
    try:
        rc = fn(*args)
    except BaseException:  # KeyboardInterrupt: the worker was killed
        set_wpid(c, 0)
        raise
    finally:
        inflight[0] = 0
    if rc < 0 or not d.get(WORKER_PID_KEY):
        settle(c, rc)
    return rc


def settle(c, rc):
    """After a call: raises its error (forgetting the worker's pid: it may be
    replaced), or looks the worker's pid up if it is not known yet."""
    if rc < 0:
        set_wpid(c, 0)
        raise c.error(rc)
    try:
        set_wpid(c, c.stats().worker_pid)
    except Exception:  # no stats: Ctrl-C then waits for the call
        set_wpid(c, -1)


def set_wpid(c, pid):
    """The session's worker pid, for Ctrl-C: here and in the C++ kernels."""
    c.set_worker_pid(pid)
