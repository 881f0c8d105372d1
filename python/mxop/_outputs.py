"""Kept for _torch_library.py until it stops importing it: which functions
allocate and free op outputs is libmxop's own now (mxop_array_alloc gives
shared-heap outputs while mxop_shared_outputs is on, mxop_array_free frees
either kind), so there are no others to hand out.  Nothing else in the
package uses this module."""


def addresses():
    """None: libmxop's own mxop_array_alloc and mxop_array_free serve."""
    return None


def functions():
    """None: libmxop's own mxop_array_alloc and mxop_array_free serve."""
    return None


def subscribe(fn):
    """Nothing to tell: the output functions never change."""
