"""A client's shared memory: arena blocks, regions, and NumPy views of them.

ClientMemory is the memory half of mxop.Client (a base class of it): arena
allocations (empty / zeros / asarray and every op output), user regions
(region_create / register_fd) and the packing of a NumPy array into an
mxop_array_t record.  Which region an address lies in is libmxop's to know
(mxop_region_lookup; a call resolves a heap array itself): an array that is
not a whole arena block goes as region 0 and its pointer.

An arena allocation is a Block (the mxop_array_t libmxop filled in); a NumPy
view of it is made over a ctypes buffer whose `_mxop` attribute holds the
Block, so the block is returned to the arena when the last array viewing it
is gone.
"""

import ctypes
import threading

import numpy as np

from . import _fast, _lib
from ._dtypes import CODE_OF_NUMPY, dtype_code, numpy_dtype
from ._lib import lib, MxopArray
from ._records import ARRAY_SIZE as _ASZ, MAX_DIMS, OFF_REQ, OutSpec, ZPAD as _ZPAD, pack_array
from .errors import InvalidArgument

_addressof = ctypes.addressof
_c_char = ctypes.c_char
_frombuffer = np.frombuffer
_ndarray = np.ndarray


class Block(MxopArray):
    """One arena allocation: the mxop_array_t libmxop filled in, returned to
    the arena when garbage.  Its fields (data, region, offset, nbytes) are
    the struct's own."""

    client = None

    def __del__(self):
        c = self.client
        if c is None:
            return
        try:
            c._free_block(self)
        except Exception:  # interpreter shutdown: the process is ending anyway
            pass


# A NumPy view of a block is made over a ctypes buffer of the block's size
# (the fastest way to an ndarray whose base holds the block).  ctypes makes
# and keeps one type per size, so past this many distinct sizes views are
# made through __array_interface__ instead (slower, but no new type).
_BUFTYPES_MAX = 2048
_buftypes = {}


class _Holder:
    """The base of a view made through __array_interface__: holds the block."""

    __slots__ = ("_mxop", "__array_interface__")

    def __init__(self, b, npdtype, shape):
        self._mxop = b
        self.__array_interface__ = {"data": (b.data, False), "shape": tuple(shape),
                                    "typestr": npdtype.str, "version": 3}


def view(b, npdtype, shape):
    """A NumPy array of `npdtype` and `shape` viewing block `b` (which it holds)."""
    n = b.nbytes
    t = _buftypes.get(n)
    if t is None:
        if len(_buftypes) >= _BUFTYPES_MAX:
            return np.asarray(_Holder(b, npdtype, shape))
        t = _buftypes[n] = _c_char * n
    buf = t.from_address(b.data)
    buf._mxop = b
    return _frombuffer(buf, npdtype).reshape(shape)


def block_of(a):
    """The arena block under array `a` (None if it is not an mxop allocation)."""
    base = a
    while isinstance(base, _ndarray):
        base = base.base
    b = getattr(base, "_mxop", None)
    fc = _fast.fc
    if type(b) is Block or (fc and type(b) is fc.Block):
        return b
    return None


class Region:
    """A user region: memory the worker maps too (Client.region_create / register_fd)."""

    def __init__(self, client, rid, base, nbytes, keep=None):
        self.client = client
        self.id = rid
        self.base = base
        self.nbytes = nbytes
        self._keep = keep

    def array(self, shape, dtype=np.float32, offset=0):
        """A NumPy view of the region (valid until release)."""
        if self.base is None:
            raise InvalidArgument("region %d has no mapping here" % self.id)
        d = np.dtype(dtype)
        n = int(np.prod(shape, dtype=np.int64)) * d.itemsize
        if offset < 0 or offset + n > self.nbytes:
            raise InvalidArgument("offset %d + %d bytes is outside region %d of %d bytes"
                                  % (offset, n, self.id, self.nbytes))
        buf = (_c_char * n).from_address(self.base + offset)
        buf._mxop = self
        return _frombuffer(buf, d).reshape(shape)

    def release(self):
        if self.id and self.client.handle:
            self.client.release_region(self)
        self.id = 0


class ClientMemory:
    """The memory half of a Client (see the module's docstring).  The session
    half (client.py) provides handle, check_handle(), error(rc), check(rc),
    _h, _close_pending and _finish_close()."""

    def _init_memory(self):
        self._live = 0  # live arena blocks
        self._bufpool = {}
        self._lock = threading.Lock()
        # Copies made here of non-contiguous inputs (into shared memory, so
        # that they are the only copy); libmxop counts its own in staged_bytes.
        self.staged_copies = 0
        self.staged_copy_bytes = 0
        # What a binding registered for this client: mxop.torch's shared
        # storages (their base -> an entry holding the Region and a weak
        # reference to the storage) and the ids of its CUDA device regions.
        self.storage_regions = {}
        self.device_regions = set()

    @property
    def live_blocks(self):
        """Arena blocks of this client still alive (arrays viewing them)."""
        return self._live

    def region_of(self, ptr, nbytes):
        """(region, offset) of [ptr, ptr + nbytes) when it lies in memory of
        this client that this process maps (mxop_region_lookup), else None."""
        h = self._h
        if not h or not ptr:
            return None
        rid = ctypes.c_uint32()
        off = ctypes.c_uint64()
        if lib.mxop_region_lookup(h, ptr, nbytes, _addressof(rid), _addressof(off)) != 1:
            return None
        return rid.value, off.value

    # ---- arena blocks -----------------------------------------------------------

    def alloc(self, dtype, ndim, caddr):
        """A new arena Block for (dtype, ndim, C shape array at caddr); a
        shared-heap block (region 0) while mxop.allocator gives outputs there."""
        h = self.check_handle()
        b = Block()
        rc = lib.mxop_array_alloc(h, dtype, ndim, caddr, _addressof(b))
        if rc < 0:
            raise self.error(rc)  # b has no client: its __del__ does nothing
        b.client = self
        self._live += 1
        return b

    def alloc_outputs(self, specs, ob_addr, needs=None):
        """A block per output spec (OutSpec), its record written into the
        output records at ob_addr; the one way both bindings make a call's
        outputs.  An output with needs[i] false goes as req null: the op
        leaves it alone, and its block is held until the call returns."""
        blocks = []
        for i, s in enumerate(specs):
            b = self.alloc(s.dtype, s.ndim, s.caddr)
            at = ob_addr + i * _ASZ
            ctypes.memmove(at, ctypes.addressof(b), _ASZ)
            if needs is not None and not needs[i]:
                ctypes.c_int32.from_address(at + OFF_REQ).value = _lib.REQ_NULL
            blocks.append(b)
        return blocks

    def _free_block(self, b):
        # A shared-heap block needs no session: libmxop frees either kind.
        if self._h or b.region == 0:
            lib.mxop_array_free(self._h, _addressof(b))
        self._live -= 1
        if self._live == 0 and self._close_pending:
            self._finish_close()

    view = staticmethod(view)

    def empty(self, shape, dtype=np.float32):
        """An uninitialised array in shared memory (passes to ops without a copy)."""
        if isinstance(shape, (int, np.integer)):
            shape = (int(shape),)
        code = dtype_code(dtype)
        spec = OutSpec(code, shape)
        if spec.ndim > MAX_DIMS:
            raise InvalidArgument("%d dimensions; mxop allows at most %d"
                                  % (spec.ndim, MAX_DIMS))
        b = self.alloc(code, spec.ndim, spec.caddr)
        return view(b, numpy_dtype(code), spec.shape)

    def zeros(self, shape, dtype=np.float32):
        a = self.empty(shape, dtype)
        a.fill(0)  # the arena reuses freed blocks, so zero explicitly
        return a

    def asarray(self, x, dtype=None):
        """`x` in this client's shared memory: returned as is if it is already
        there, else copied once into a new arena array."""
        x = np.asarray(x, dtype=dtype)
        if self.owns(x):
            return x
        a = self.empty(x.shape, x.dtype)
        a[...] = x
        return a

    def owns(self, x):
        """True if array `x` (C-contiguous) lies in one of this client's regions."""
        if not isinstance(x, _ndarray) or not x.flags.c_contiguous:
            return False
        return self.region_of(x.__array_interface__["data"][0], x.nbytes) is not None

    # ---- user regions -------------------------------------------------------------

    def region_create(self, nbytes):
        """A new region of `nbytes` (a memfd mapped here and in the worker)."""
        rid = ctypes.c_uint32()
        base = ctypes.c_void_p()
        self.check(lib.mxop_region_create(self.check_handle(), nbytes, ctypes.byref(rid),
                                          ctypes.byref(base)))
        return Region(self, rid.value, base.value, nbytes)

    def register_fd(self, fd, nbytes, base=None, map_here=False, check=None):
        """Registers shared memory the process already has (a memfd or /dev/shm
        file, `fd` borrowed).  `base`: the address where this process maps it
        (mxop_region_register_fd_at: arrays there pass without a copy;
        release the region before unmapping it); map_here makes a new
        mapping.  `check` is no longer used (libmxop keeps the mapping)."""
        h = self.check_handle()
        rid = ctypes.c_uint32()
        if base is not None and not map_here:
            self.check(lib.mxop_region_register_fd_at(h, fd, nbytes, base, _addressof(rid)))
            return Region(self, rid.value, base, nbytes)
        mb = ctypes.c_void_p()
        self.check(lib.mxop_region_register_fd(h, fd, nbytes, _addressof(rid),
                                               _addressof(mb) if map_here else None))
        return Region(self, rid.value, mb.value if map_here else None, nbytes)

    def release_region(self, r):
        """Releases Region `r` (Region.release calls it)."""
        self.check(lib.mxop_region_release(self._h, r.id))

    # ---- call records shared by the NumPy and PyTorch layers -------------------

    def records(self, n_in, n_out):
        """A pair of mxop_array_t arrays from the pool, as (in buffer, its
        address, out buffer, its address, key); hand it back with
        give_records()."""
        pool = self._bufpool.get((n_in, n_out))
        if pool:
            try:
                return pool.pop()
            except IndexError:  # another thread took the last one
                pass
        ib = ctypes.create_string_buffer(max(n_in, 1) * _ASZ)
        ob = ctypes.create_string_buffer(max(n_out, 1) * _ASZ)
        return (ib, _addressof(ib), ob, _addressof(ob), (n_in, n_out))

    def give_records(self, bufs):
        self._bufpool.setdefault(bufs[4], []).append(bufs)

    def pack_numpy(self, buf, i, a, keep):
        """Writes input record i of `buf` for NumPy array `a` (anything else
        is converted; copies made are appended to `keep`); returns (dtype, shape)."""
        if type(a) is not _ndarray:
            a = np.asarray(a)
            keep.append(a)
        code = CODE_OF_NUMPY.get(a.dtype)
        if code is None:
            if a.dtype.kind in "fiub" and not a.dtype.isnative:
                a = a.astype(a.dtype.newbyteorder("="))
                keep.append(a)
                code = CODE_OF_NUMPY.get(a.dtype)
            if code is None:
                raise InvalidArgument("input %d: dtype %s has no mxop equivalent"
                                      % (i, a.dtype))
        if not a.flags.c_contiguous:
            # One copy, straight into shared memory (staging it would be a second).
            src = a
            a = self.empty(src.shape, src.dtype)
            np.copyto(a, src)
            keep.append(a)
            self.staged_copies += 1
            self.staged_copy_bytes += a.nbytes
        shape = a.shape
        ndim = len(shape)
        if ndim > MAX_DIMS:
            raise InvalidArgument("input %d has %d dimensions; mxop allows at most %d"
                                  % (i, ndim, MAX_DIMS))
        nbytes = a.nbytes
        # Fast path: a whole arena array, recognised by its buffer's block.
        base = a.base
        while type(base) is _ndarray:
            base = base.base
        b = getattr(base, "_mxop", None)
        if type(b) is Block and b.client is self and nbytes == b.nbytes:
            pack_array(buf, i * _ASZ, b.data, code, ndim, *shape, *_ZPAD[ndim],
                       b.region, b.offset, nbytes, 0)
            return code, shape
        # Anything else goes as region 0 and its pointer: libmxop finds the
        # region it lies in (no copy), else stages it.
        ptr = a.__array_interface__["data"][0]
        pack_array(buf, i * _ASZ, ptr, code, ndim, *shape, *_ZPAD[ndim], 0, 0, nbytes, 0)
        return code, shape
