"""Shared torch storages as regions of a client.

A CPU tensor after share_memory_() passes without a copy: its storage's
file descriptor (storage._share_fd_cpu_()) is registered once as a region,
kept in the client's storage_regions (by the storage's base) and released
when the storage dies (a weak reference tells).
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


def sweep(c):
    """Releases the regions of storages that are gone."""
    cache = c.storage_regions
    for base, e in list(cache.items()):
        if e.weak is not None and e.weak.expired():
            del cache[base]
            try:
                e.region.release()
            except Exception:
                pass


def register_storage(c, t):
    """Registers the shared storage of `t` as a region of `c` (once per
    storage); returns True if it is now in c's address table."""
    if _StorageWeakRef is None or torch.multiprocessing.get_sharing_strategy() != \
            "file_descriptor":
        return False
    s = t.storage()
    u = _untyped(s)
    base = u.data_ptr()
    nbytes = u.nbytes()
    cache = c.storage_regions
    e = cache.get(base)
    if e is not None:
        if not e.weak.expired() and e.nbytes == nbytes:
            return True  # the table has it (a region lookup missed for another reason)
        del cache[base]
        e.region.release()
    sweep(c)
    try:
        fd, _ = s._share_fd_cpu_()
    except Exception:
        return False
    if u.data_ptr() != base:  # sharing moved the storage: look it up afresh
        return False
    e = _StorageRegion()
    e.weak = _StorageWeakRef(s)
    e.base = base
    e.nbytes = nbytes
    e.region = c.register_fd(fd, nbytes, base=base, check=lambda: _still_alive(c, e))
    cache[base] = e
    return True


def _still_alive(c, e):
    """A lookup landed in e's region: true while its storage lives (while it
    does, nothing else can be mapped at its address).  A dead one's region
    is released here, so that memory now at that address is not mistaken
    for it."""
    if not e.weak.expired():
        return True
    if c.storage_regions.get(e.base) is e:
        del c.storage_regions[e.base]
    try:
        e.region.release()
    except Exception:
        pass
    return False


def shared_regions(c):
    """Number of torch storages registered as regions of client `c` (live ones)."""
    sweep(c)
    return len(c.storage_regions)

