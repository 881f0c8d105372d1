"""Shared torch storages as regions of a client.

A CPU tensor after share_memory_() passes without a copy: its storage's
file descriptor (storage._share_fd_cpu_()) is registered once as a region
(mxop_region_register_fd, with no base: libmxop is never told where the
storage lies here), kept in the client's storage_regions by the storage's
base with a weak reference to the storage, and released when the storage
dies.  A call passes such a tensor as (region, offset) explicitly, and only
after checking that the entry's storage is the tensor's, alive: so memory
that a dead storage's address now holds is never taken for its region.
"""

import torch

try:
    from torch.multiprocessing.reductions import StorageWeakRef as _StorageWeakRef
except ImportError:  # pragma: no cover - other torch versions
    _StorageWeakRef = None


class _StorageRegion:
    __slots__ = ("weak", "region", "base", "nbytes")


def _untyped(storage):
    return storage._storage if hasattr(storage, "_storage") else storage


def _release(e):
    try:
        e.region.release()
    except Exception:  # the client closed: its regions went with it
        pass


def sweep(c):
    """Releases the regions of storages that are gone."""
    cache = c.storage_regions
    for base, e in list(cache.items()):
        if e.weak.expired():
            del cache[base]
            _release(e)


def region_of(c, t):
    """(region, offset) of shared CPU tensor `t` (contiguous, not empty) in
    its storage's region of client `c`, registering the storage on first
    use; None when it cannot be (another sharing strategy, a storage that
    cannot give its fd): the tensor is then staged."""
    if _StorageWeakRef is None or torch.multiprocessing.get_sharing_strategy() != \
            "file_descriptor":
        return None
    # The untyped storage where torch has it: TypedStorage is deprecated (it warns).
    s = t.untyped_storage() if hasattr(t, "untyped_storage") else t.storage()
    u = _untyped(s)
    base = u.data_ptr()
    nbytes = u.nbytes()
    cache = c.storage_regions
    e = cache.get(base)
    if e is not None:
        # The tensor holds its storage alive, so a live entry at its base with
        # its size is its storage's; anything else is a dead one's.
        if not e.weak.expired() and e.nbytes == nbytes:
            return e.region.id, t.data_ptr() - base
        del cache[base]
        _release(e)
    sweep(c)
    try:
        fd, _ = s._share_fd_cpu_()
    except Exception:
        return None
    if u.data_ptr() != base:  # sharing moved the storage: the next call registers it
        return None
    e = _StorageRegion()
    e.weak = _StorageWeakRef(s)
    e.base = base
    e.nbytes = nbytes
    e.region = c.register_fd(fd, nbytes)
    cache[base] = e
    return e.region.id, t.data_ptr() - base


def shared_regions(c):
    """Number of torch storages registered as regions of client `c` (live ones)."""
    sweep(c)
    return len(c.storage_regions)
