"""Clients, ops, states and shared-memory arrays (the NumPy layer).

A Client is one session with mxop-serverd (one worker).  Its ops run on
arrays that travel as (region, offset, dtype, shape):

  - arrays the client allocated (Client.empty / zeros / asarray, and every
    op output) live in the client's shared-memory arena and pass without a
    copy;
  - arrays inside any other region registered with the client (a PyTorch
    storage after share_memory_(), a region from Client.region_create) pass
    without a copy too: the client keeps an address table of its regions;
  - anything else is staged: the C library copies it into its staging
    region for the call (one copy, counted in Stats.staged_bytes).

An op output is a NumPy array viewing the arena block: no copy.  The block
is returned to the arena when the last array viewing it is gone (the
ctypes buffer under the array holds the _Block that frees it).

Per-call cost: each Op keeps its mxop_call_t and attribute arrays per
attribute set, and its inferred output shapes per input signature, so a
call with known shapes costs Python only the packing of the tensor records
(one struct.pack_into each) and one ctypes call.
"""

import bisect
import ctypes
import os
import threading
import weakref

import numpy as np

from . import _fast, _lib, _outputs
from ._lib import lib, MxopArray, MxopCall, MxopShape, MxopOpInfo, MxopStats
from .errors import make_error, InvalidArgument, Disconnected

MAX_DIMS = _lib.MAX_DIMS
_ASZ = _lib.ARRAY_SIZE
_pack_array = _lib.ARRAY_STRUCT.pack_into
_memmove = ctypes.memmove
_addressof = ctypes.addressof
_c_char = ctypes.c_char
_frombuffer = np.frombuffer
_ndarray = np.ndarray
_OFF_REQ = MxopArray.req.offset
_ZPAD = tuple((0,) * (MAX_DIMS - k) for k in range(MAX_DIMS + 1))

# The C call path (_fastcall.c, see _fast.py): None until the first Client
# is made, then the module, or False when it is missing or disabled
# (MXOP_NO_FASTCALL=1) and every call takes the ctypes path below.
_fc = None
# The C++ kernels of torch.ops (_torch_library._Hooks) once they are loaded:
# told of each session's arena regions, worker and close.
_tops = None

# NumPy dtype <-> mxop dtype.  Only native byte order maps; others are converted.
_NP_OF = {
    _lib.F32: np.dtype(np.float32),
    _lib.F64: np.dtype(np.float64),
    _lib.F16: np.dtype(np.float16),
    _lib.I32: np.dtype(np.int32),
    _lib.I64: np.dtype(np.int64),
    _lib.U8: np.dtype(np.uint8),
    _lib.I8: np.dtype(np.int8),
    _lib.BOOL: np.dtype(np.bool_),
}
_MX_OF_NP = {v: k for k, v in _NP_OF.items()}
_MX_OF_NAME = {n: i for i, n in enumerate(_lib.DTYPE_NAMES)}
# The mxop dtype numbers of torch's dtypes, by name: this module reads a
# tensor's dtype without importing torch or mxop.torch (which builds its own
# table from this one).
_MX_OF_TORCH_NAME = {
    "float32": _lib.F32, "float64": _lib.F64, "float16": _lib.F16, "bfloat16": _lib.BF16,
    "int32": _lib.I32, "int64": _lib.I64, "uint8": _lib.U8, "int8": _lib.I8, "bool": _lib.BOOL,
}


def dtype_code(dtype):
    """The mxop dtype number of a NumPy dtype, an mxop name ("f32") or a number."""
    if isinstance(dtype, int) and not isinstance(dtype, bool):
        if 0 <= dtype < _lib.DTYPE_COUNT:
            return dtype
        raise InvalidArgument(-1001, "unknown mxop dtype %d" % dtype)
    if isinstance(dtype, str) and dtype in _MX_OF_NAME:
        return _MX_OF_NAME[dtype]
    try:
        d = np.dtype(dtype)
    except TypeError:
        d = None
    code = _MX_OF_NP.get(d)
    if code is None:
        raise InvalidArgument(-1001, "dtype %r has no mxop equivalent (f32, f64, f16, i32, "
                                     "i64, u8, i8, bool)" % (dtype,))
    return code


def numpy_dtype(code):
    """The NumPy dtype of an mxop dtype number (bf16 has none)."""
    d = _NP_OF.get(code)
    if d is None:
        raise InvalidArgument(-1001, "mxop dtype %s has no NumPy equivalent"
                              % (_lib.DTYPE_NAMES[code] if 0 <= code < 9 else code))
    return d


def _ms(seconds, what):
    ms = int(round(seconds * 1000))
    if ms <= 0:
        raise InvalidArgument(-1001, "%s must be positive, got %r s" % (what, seconds))
    return ms


def _attr_value(v):
    # Booleans as "1"/"0" (what host->attr_bool reads), integral floats as
    # integers, so that 1, 1.0 and True give one cache key and one string.
    if v is True:
        return "1"
    if v is False:
        return "0"
    if isinstance(v, float):
        return str(int(v)) if v.is_integer() and abs(v) < 2**63 else repr(v)
    if isinstance(v, bytes):
        return v.decode()
    if isinstance(v, (list, tuple)):
        # A list attribute: "2,3" is what host->attr_int_list reads.
        return ",".join(_attr_value(x) for x in v)
    return str(v)


def _attr_value_mxnet(v):
    # An MXNet extension library's op gets what MXNet passes: str(v), so
    # True is "True", 1.0 is "1.0" and [2, 3] is "[2, 3]".
    return v.decode() if isinstance(v, bytes) else str(v)


class AttrDecl(tuple):
    """One attribute an op declares: (name, type, default, required, doc).

    type is "int", "float", "bool", "string", "int_list" or "float_list";
    default is the declared default as a Python value (None when there is
    none)."""

    __slots__ = ()

    def __new__(cls, name, type, default, required, doc):
        return tuple.__new__(cls, (name, type, default, required, doc))

    name = property(lambda self: self[0])
    type = property(lambda self: self[1])
    default = property(lambda self: self[2])
    required = property(lambda self: self[3])
    doc = property(lambda self: self[4])

    def __repr__(self):
        return "AttrDecl(name=%r, type=%r, default=%r, required=%r, doc=%r)" % tuple(self)


def _parse_default(type_name, text):
    """A declared default (a string in the type's syntax) as a Python value."""
    if text is None:
        return None
    if type_name == "int":
        return int(text)
    if type_name == "float":
        return float(text)
    if type_name == "bool":
        return text.strip().lower() in ("1", "true")
    if type_name in ("int_list", "float_list"):
        body = text.strip()
        if body[:1] in "([" and body[-1:] in ")]":
            body = body[1:-1]
        conv = int if type_name == "int_list" else float
        return tuple(conv(x) for x in body.split(",") if x.strip())
    return text


def _op_attrs(handle):
    """The declarations of the op at `handle`, as a tuple of AttrDecl."""
    out = []
    for i in range(max(lib.mxop_op_attr_count(handle), 0)):
        a = _lib.MxopAttrInfo()
        a.struct_size = ctypes.sizeof(a)
        if lib.mxop_op_attr(handle, i, _addressof(a)) != 0:
            break
        t = _lib.ATTR_TYPE_NAMES.get(a.type, "unknown")
        dflt = a.default_value.decode() if a.default_value is not None else None
        try:
            dflt = _parse_default(t, dflt)
        except ValueError:
            pass
        out.append(AttrDecl(a.name.decode(), t, dflt, bool(a.required), (a.doc or b"").decode()))
    return tuple(out)


class _Block(MxopArray):
    """One arena allocation: the mxop_array_t libmxop filled in, returned to
    the arena when garbage.  Its fields (data, region, offset, nbytes) are
    the struct's own."""

    client = None

    def __del__(self):
        c = self.client
        if c is None:
            return
        try:
            if c._h or self.region == 0:  # a shared-heap block needs no session
                out = _outputs.functions()  # an output may be a shared-heap block (region 0)
                (out[1] if out else lib.mxop_array_free)(c._h, _addressof(self))
            c._live -= 1
            if c._live == 0 and c._close_pending:
                c._finish_close()
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


class _OutSpec:
    """An inferred output: dtype, shape, and the C shape array for mxop_array_alloc."""

    __slots__ = ("dtype", "ndim", "shape", "cshape", "caddr", "npdtype", "nbytes")

    def __init__(self, dtype, shape):
        self.dtype = dtype
        self.shape = tuple(int(d) for d in shape)
        self.ndim = len(self.shape)
        self.cshape = (ctypes.c_int64 * MAX_DIMS)(*self.shape)
        self.caddr = _addressof(self.cshape)
        self.npdtype = _NP_OF.get(dtype)
        n = _lib.DTYPE_SIZES[dtype]
        for d in self.shape:
            n *= d
        self.nbytes = n


class _CallEntry:
    """A prebuilt mxop_call_t with its attribute array (one per attribute set)."""

    __slots__ = ("key", "call", "addr", "attrs", "attrs_addr", "keep", "pairs")

    def __init__(self, key, pairs, state=0, timeout_ms=0, seed=0):
        self.key = key
        self.pairs = pairs  # ((key, value-string), ...)
        self.keep = [s.encode() for kv in pairs for s in kv]
        if pairs:
            self.attrs = (ctypes.c_char_p * (len(self.keep) + 1))(*self.keep, None)
            self.attrs_addr = _addressof(self.attrs)
        else:
            self.attrs = None
            self.attrs_addr = None
        self.call = MxopCall(struct_size=ctypes.sizeof(MxopCall), attrs=self.attrs_addr,
                             state=state, timeout_ms=timeout_ms, seed=seed)
        self.addr = _addressof(self.call)


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
            raise InvalidArgument(-1001, "region %d has no mapping here" % self.id)
        d = np.dtype(dtype)
        n = int(np.prod(shape, dtype=np.int64)) * d.itemsize
        if offset < 0 or offset + n > self.nbytes:
            raise InvalidArgument(-1001, "offset %d + %d bytes is outside region %d of %d bytes"
                                  % (offset, n, self.id, self.nbytes))
        buf = (_c_char * n).from_address(self.base + offset)
        buf._mxop = self
        return _frombuffer(buf, d).reshape(shape)

    def release(self):
        if self.id and self.client._h:
            self.client._region_release(self)
        self.id = 0


class Client:
    """One session with mxop-serverd.  Use mxop.connect() to make one."""

    def __init__(self, handle, path, daemon=None):
        self._h = handle
        self.path = path
        self.daemon = daemon
        self._ops = {}
        self._live = 0  # live arena blocks
        self._close_pending = False
        # Address table of this client's regions: sorted bases, parallel [end, id].
        self._rbase = []
        self._rinfo = []
        self._rmap = {}  # region id -> [end, id] entry of _rinfo
        self._bufpool = {}
        self._lock = threading.Lock()
        self._torch_regions = {}  # mxop.torch's per-storage region cache
        # Copies made here of non-contiguous inputs (into shared memory, so
        # that they are the only copy); libmxop counts its own in staged_bytes.
        self.staged_copies = 0
        self.staged_copy_bytes = 0
        _clients.add(self)
        global _fc
        if _fc is None:
            _fc = _fast.load() or False

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
        for st in list(_states_of(self)):
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

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return "<mxop.Client %r%s>" % (self.path, " closed" if self.closed else "")

    def _handle(self):
        if not self._h or self._close_pending:
            if getattr(self, "_forked", False):
                raise Disconnected(-1007, _FORKED_MSG % (self.path,))
            raise Disconnected(-1007, "the client is closed")
        return self._h

    def _error(self, rc):
        msg = lib.mxop_last_error(self._h) if self._h else b""
        return make_error(rc, msg.decode(errors="replace") if msg else "")

    def _check(self, rc):
        if rc < 0:
            raise self._error(rc)

    # ---- settings, libraries, ops -------------------------------------------

    def set_timeout(self, seconds):
        """The default deadline of a call, in seconds."""
        self._check(lib.mxop_set_timeout(self._handle(), _ms(seconds, "timeout")))

    def load(self, name):
        """Loads the library `name` (relative to the daemon's plugin directory).

        Returns a Library whose attributes are its ops."""
        h = self._handle()
        before = set(self._op_names())
        self._check(lib.mxop_load_library(h, name.encode()))
        ops = {}
        for opname, info_lib in self._op_names().items():
            if opname not in before or info_lib == name:
                ops[opname] = self.op(opname)
        return Library(name, ops)

    def _op_names(self):
        h = self._handle()
        out = {}
        info = MxopOpInfo()
        for i in range(lib.mxop_op_count(h)):
            p = lib.mxop_op_at(h, i)
            if p and lib.mxop_op_info(p, _addressof(info)) == 0:
                out[info.name.decode()] = (info.library or b"").decode()
        return out

    def op(self, name):
        """The loaded op `name` (raises UnknownOp)."""
        op = self._ops.get(name)
        if op is not None:
            return op
        h = self._handle()
        p = ctypes.c_void_p()
        self._check(lib.mxop_op_find(h, name.encode(), ctypes.byref(p)))
        info = MxopOpInfo()
        self._check(lib.mxop_op_info(p.value, _addressof(info)))
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
        self._check(lib.mxop_stats(self._handle(), _addressof(st)))
        return Stats(st)

    def shutdown_daemon(self):
        """Asks the daemon to shut down; the client is then unusable."""
        self._check(lib.mxop_shutdown_daemon(self._handle()))

    # ---- memory ----------------------------------------------------------

    def _note_region(self, rid, base, end, check=None):
        """Adds (or extends) region `rid` at [base, end) in the address table.
        `check`, if given, is called on every lookup that lands in the region
        and returns False once the memory there is no longer the region's
        (a torch storage that died: another may be mapped at its address)."""
        with self._lock:
            e = self._rmap.get(rid)
            if e is not None:
                if end > e[0]:
                    e[0] = end
                    if _tops is not None and e[2] is None:
                        _tops.regions(self)
                return
            e = [end, rid, check]
            i = bisect.bisect_left(self._rbase, base)
            self._rbase.insert(i, base)
            self._rinfo.insert(i, e)
            self._rmap[rid] = e
        if _tops is not None and check is None:
            _tops.regions(self)

    def _forget_region(self, rid):
        with self._lock:
            e = self._rmap.pop(rid, None)
            if e is not None:
                i = self._rinfo.index(e)
                del self._rbase[i]
                del self._rinfo[i]
        if _tops is not None:
            _tops.regions(self)

    def _region_of(self, ptr, nbytes):
        """(region, offset) of memory inside a region of this client, else None."""
        i = bisect.bisect_right(self._rbase, ptr) - 1
        if i >= 0:
            e = self._rinfo[i]
            if ptr + nbytes <= e[0]:
                if e[2] is not None and not e[2]():
                    return None  # stale: the check has released it
                return e[1], ptr - self._rbase[i]
        return None

    def _alloc(self, dtype, ndim, caddr):
        """A new arena block for (dtype, ndim, C shape array at caddr)."""
        h = self._handle()
        b = _Block()
        out = _outputs.functions()
        rc = (out[0] if out else lib.mxop_array_alloc)(h, dtype, ndim, caddr, _addressof(b))
        if rc < 0:
            raise self._error(rc)  # b has no client: its __del__ does nothing
        b.client = self
        data = b.data or 0
        self._live += 1
        region = b.region
        e = self._rmap.get(region)
        if region and (e is None or data + b.nbytes > e[0]):
            self._note_region(region, data - b.offset, data + b.nbytes)
        return b

    @staticmethod
    def _view(b, npdtype, shape):
        n = b.nbytes
        t = _buftypes.get(n)
        if t is None:
            if len(_buftypes) >= _BUFTYPES_MAX:
                return np.asarray(_Holder(b, npdtype, shape))
            t = _buftypes[n] = _c_char * n
        buf = t.from_address(b.data)
        buf._mxop = b
        return _frombuffer(buf, npdtype).reshape(shape)

    def empty(self, shape, dtype=np.float32):
        """An uninitialised array in shared memory (passes to ops without a copy)."""
        if isinstance(shape, (int, np.integer)):
            shape = (int(shape),)
        code = dtype_code(dtype)
        spec = _OutSpec(code, shape)
        if spec.ndim > MAX_DIMS:
            raise InvalidArgument(-1001, "%d dimensions; mxop allows at most %d"
                                  % (spec.ndim, MAX_DIMS))
        b = self._alloc(code, spec.ndim, spec.caddr)
        return self._view(b, numpy_dtype(code), spec.shape)

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
        return self._region_of(x.__array_interface__["data"][0], x.nbytes) is not None

    def region_create(self, nbytes):
        """A new region of `nbytes` (a memfd mapped here and in the worker)."""
        rid = ctypes.c_uint32()
        base = ctypes.c_void_p()
        self._check(lib.mxop_region_create(self._handle(), nbytes, ctypes.byref(rid),
                                           ctypes.byref(base)))
        r = Region(self, rid.value, base.value, nbytes)
        self._note_region(r.id, r.base, r.base + nbytes)
        return r

    def register_fd(self, fd, nbytes, base=None, map_here=False, check=None):
        """Registers shared memory the process already has (a memfd or /dev/shm
        file, `fd` borrowed).  `base`: the address where this process maps it
        (so arrays there pass without a copy); map_here makes a new mapping."""
        rid = ctypes.c_uint32()
        mb = ctypes.c_void_p()
        self._check(lib.mxop_region_register_fd(self._handle(), fd, nbytes, ctypes.byref(rid),
                                                ctypes.byref(mb) if map_here else None))
        if map_here:
            base = mb.value
        r = Region(self, rid.value, base, nbytes)
        if base is not None:
            self._note_region(r.id, base, base + nbytes, check)
        return r

    def _region_release(self, r):
        self._forget_region(r.id)
        self._check(lib.mxop_region_release(self._h, r.id))

    # ---- call plumbing shared by the NumPy and PyTorch layers -----------------

    def _bufs(self, n_in, n_out):
        """A pair of mxop_array_t arrays from the pool (return with _give)."""
        pool = self._bufpool.get((n_in, n_out))
        if pool:
            try:
                return pool.pop()
            except IndexError:  # another thread took the last one
                pass
        ib = ctypes.create_string_buffer(max(n_in, 1) * _ASZ)
        ob = ctypes.create_string_buffer(max(n_out, 1) * _ASZ)
        return (ib, _addressof(ib), ob, _addressof(ob), (n_in, n_out))

    def _give(self, bufs):
        self._bufpool.setdefault(bufs[4], []).append(bufs)

    def _pack_np(self, buf, i, a, keep):
        """Writes input record i for NumPy array `a`; returns (dtype, shape)."""
        if type(a) is not _ndarray:
            a = np.asarray(a)
            keep.append(a)
        code = _MX_OF_NP.get(a.dtype)
        if code is None:
            if a.dtype.kind in "fiub" and not a.dtype.isnative:
                a = a.astype(a.dtype.newbyteorder("="))
                keep.append(a)
                code = _MX_OF_NP.get(a.dtype)
            if code is None:
                raise InvalidArgument(-1001, "input %d: dtype %s has no mxop equivalent"
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
            raise InvalidArgument(-1001, "input %d has %d dimensions; mxop allows at most %d"
                                  % (i, ndim, MAX_DIMS))
        nbytes = a.nbytes
        # Fast path: a whole arena array, recognised by its buffer's block.
        base = a.base
        while type(base) is _ndarray:
            base = base.base
        b = getattr(base, "_mxop", None)
        if type(b) is _Block and b.client is self and nbytes == b.nbytes:
            _pack_array(buf, i * _ASZ, b.data, code, ndim, *shape, *_ZPAD[ndim],
                        b.region, b.offset, nbytes, 0)
            return code, shape
        ptr = a.__array_interface__["data"][0]
        ro = self._region_of(ptr, nbytes) if self._rbase else None
        if ro is None:
            _pack_array(buf, i * _ASZ, ptr, code, ndim, *shape, *_ZPAD[ndim], 0, 0, nbytes, 0)
        else:
            _pack_array(buf, i * _ASZ, ptr, code, ndim, *shape, *_ZPAD[ndim],
                        ro[0], ro[1], nbytes, 0)
        return code, shape


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


os.register_at_fork(after_in_child=_after_fork_in_child)


def block_of(a):
    """The arena block under array `a` (None if it is not an mxop allocation)."""
    base = a
    while isinstance(base, _ndarray):
        base = base.base
    b = getattr(base, "_mxop", None)
    if type(b) is _Block or (_fc and type(b) is _fc.Block):
        return b
    return None


class Library:
    """The ops of one loaded library, as attributes and as .ops (a dict)."""

    def __init__(self, name, ops):
        self.name = name
        self.ops = ops
        self.__dict__.update({k: v for k, v in ops.items() if k.isidentifier()})

    def __getitem__(self, name):
        return self.ops[name]

    def __iter__(self):
        return iter(self.ops.values())

    def __repr__(self):
        return "<mxop.Library %r: %s>" % (self.name, ", ".join(self.ops))


class Op:
    """An op of a loaded library, callable on NumPy arrays.

        y = op(x, alpha=2.0)               # forward; outputs inferred and allocated
        dx = op.backward([dy], [x], [y])   # gradients of the inputs
        st = op.create_state(x)            # stateful ops: a State

    Keyword arguments are the op's attributes (bools become "1"/"0").
    Reserved keywords: out= (output arrays), timeout= (seconds), seed=,
    attrs= (a dict, for attribute names that clash with these).
    """

    def __init__(self, client, handle, info):
        self.client = client
        self._p = handle
        self.name = info.name.decode()
        self.description = (info.description or b"").decode()
        self.library = (info.library or b"").decode()
        self.num_inputs = info.num_inputs
        self.min_inputs = info.min_inputs
        self.num_outputs = info.num_outputs
        self.mutated_inputs = info.mutated_inputs
        self.has_backward = bool(info.has_backward)
        self.stateful = bool(info.stateful)
        # Declared attributes (empty: the op declares none and takes any).
        self.attrs = _op_attrs(handle)
        self.flags = lib.mxop_op_flags(handle)
        self.strided = bool(self.flags & _lib.OP_STRIDED)
        # Outputs whose shape is known only after forward (bit j: output j).
        self.dynamic_outputs = lib.mxop_op_dynamic_outputs(handle)
        self._calls = {}
        self._infer = {}
        # Calls the C path can make whole (no out=): the others, in-place,
        # strided and dynamic-shape ops, need the checks of the ctypes path.
        self._fast = not (self.mutated_inputs or self.strided or self.dynamic_outputs)

    def __repr__(self):
        return "<mxop.Op %s (%s): %s in, %d out%s%s>" % (
            self.name, self.library,
            self.num_inputs if self.num_inputs >= 0 else ">=%d" % self.min_inputs,
            self.num_outputs, ", backward" if self.has_backward else "",
            ", stateful" if self.stateful else "")

    # ---- attributes and prebuilt calls --------------------------------------

    def _entry(self, kw, state=0, timeout=None, seed=None):
        """The prebuilt call for attributes `kw` (a dict)."""
        pairs = None
        if self.flags & _lib.OP_MXNET:
            # 1, 1.0 and True are one dict key but three strings for MXNet.
            key = pairs = tuple((str(k), _attr_value_mxnet(v)) for k, v in kw.items())
        else:
            key = tuple(kw.items()) if kw else ()
        if timeout is None and seed is None and not state:
            try:
                ent = self._calls.get(key)
            except TypeError:
                # A list attribute given as a Python list: cached as a tuple.
                key = tuple((k, tuple(v) if isinstance(v, list) else v) for k, v in kw.items())
                ent = self._calls.get(key)
            if ent is not None:
                return ent
        if pairs is None:
            pairs = tuple((str(k), _attr_value(v)) for k, v in kw.items())
        tms = _ms(timeout, "timeout") if timeout is not None else 0
        ent = _CallEntry(pairs, pairs, state=state, timeout_ms=tms, seed=int(seed or 0))
        if timeout is None and seed is None and not state:
            if len(self._calls) > 1024:
                self._calls.clear()
            self._calls[key] = ent
        return ent

    def bind(self, **attrs):
        """The op with attributes fixed: a callable that skips attribute handling."""
        return BoundOp(self, self._entry(attrs))

    # ---- inference -------------------------------------------------------

    def _specs(self, ent, sig):
        """The outputs' _OutSpecs for input signature `sig` ((dtype, shape), ...)."""
        k = (ent.pairs, sig)
        specs = self._infer.get(k)
        if specs is not None:
            return specs
        n_in = len(sig)
        n_out = self.num_outputs
        in_dt = (ctypes.c_int32 * max(n_in, 1))(*[d for d, _ in sig])
        in_sh = (MxopShape * max(n_in, 1))()
        for i, (_, shape) in enumerate(sig):
            in_sh[i].ndim = len(shape)
            for j, d in enumerate(shape):
                in_sh[i].dims[j] = d
        out_dt = (ctypes.c_int32 * max(n_out, 1))()
        out_sh = (MxopShape * max(n_out, 1))()
        rc = lib.mxop_infer(self.client._handle(), self._p, ent.attrs_addr, n_in,
                            _addressof(in_dt), _addressof(in_sh), n_out,
                            _addressof(out_dt), _addressof(out_sh))
        if rc < 0:
            raise self.client._error(rc)
        specs = tuple(_OutSpec(out_dt[i], tuple(out_sh[i].dims[:out_sh[i].ndim]))
                      for i in range(n_out))
        if len(self._infer) > 4096:
            self._infer.clear()
        self._infer[k] = specs
        return specs

    def infer(self, *inputs, attrs=None, **kw):
        """Output (dtype name, shape) pairs for inputs given as arrays or
        (shape, dtype) pairs, without running the op."""
        if attrs:
            kw = {**attrs, **kw}
        sig = tuple(_spec_of(x) for x in inputs)
        return [(_lib.DTYPE_NAMES[s.dtype], s.shape) for s in self._specs(self._entry(kw), sig)]

    # ---- calls -------------------------------------------------------------

    def __call__(self, *inputs, out=None, timeout=None, seed=None, attrs=None, **kw):
        if attrs:
            kw = {**attrs, **kw}
        ent = self._entry(kw, 0, timeout, seed) if (kw or timeout or seed) else \
            (self._calls.get(()) or self._entry({}))
        return self._forward_np(ent, inputs, out)

    def _forward_np(self, ent, inputs, out):
        if out is None and self._fast and _fc:
            r = _fc.call(self.client, self, ent, inputs, 0, None, 0)
            if r is not NotImplemented:
                return r
        c = self.client
        h = c._handle()
        n_in = len(inputs)
        n_out = self.num_outputs
        bufs = c._bufs(n_in, n_out)
        keep = []
        try:
            ib = bufs[0]
            pack = c._pack_np
            if self.strided and any(type(x) is _ndarray and not x.flags.c_contiguous
                                    for x in inputs):
                sig, back, ent = self._pack_strided(ib, inputs, keep, ent)
            elif self.mutated_inputs:
                sig, back = self._pack_mutated(ib, inputs, keep)
            else:
                sig = tuple([pack(ib, i, x, keep) for i, x in enumerate(inputs)])
                back = ()
            if out is None:
                specs = self._specs(ent, sig)
                ob_addr = bufs[3]
                blocks = []
                for i, s in enumerate(specs):
                    b = c._alloc(s.dtype, s.ndim, s.caddr)
                    _memmove(ob_addr + i * _ASZ, _addressof(b), _ASZ)
                    blocks.append(b)
                rc = lib.mxop_forward(h, self._p, ent.addr, bufs[1], n_in, ob_addr, n_out)
                if rc < 0:
                    raise c._error(rc)
                for dst, src in back:
                    np.copyto(dst, src)
                view = c._view
                if self.dynamic_outputs:
                    # A view of the front of the block the largest shape took.
                    real = self._real_specs(specs, ob_addr)
                    res = []
                    for b, s, r in zip(blocks, specs, real):
                        v = view(b, s.npdtype, s.shape)
                        if r.shape != s.shape:
                            v = v.reshape(-1)[:r.nbytes // v.itemsize].reshape(r.shape)
                        res.append(v)
                    return res[0] if n_out == 1 else tuple(res)
                if n_out == 1:
                    s = specs[0]
                    return view(blocks[0], s.npdtype, s.shape)
                return tuple(view(b, s.npdtype, s.shape) for b, s in zip(blocks, specs))
            outs = (out,) if isinstance(out, _ndarray) else tuple(out)
            if len(outs) != n_out:
                raise InvalidArgument(-1015, "op '%s' has %d outputs, out= gave %d"
                                      % (self.name, n_out, len(outs)))
            for i, o in enumerate(outs):
                if not isinstance(o, _ndarray) or not o.flags.c_contiguous \
                        or not o.flags.writeable:
                    raise InvalidArgument(-1001, "out[%d] must be a writable C-contiguous "
                                                 "NumPy array" % i)
                pack(bufs[2], i, o, keep)
            rc = lib.mxop_forward(h, self._p, ent.addr, bufs[1], n_in, bufs[3], n_out)
            if rc < 0:
                raise c._error(rc)
            for dst, src in back:
                np.copyto(dst, src)
            if self.dynamic_outputs:
                # The real shapes, as views of the front of the arrays given.
                outs = tuple(o.reshape(-1)[:s.nbytes // o.itemsize].reshape(s.shape)
                             for o, s in zip(outs, self._real_specs(
                                 [_OutSpec(_MX_OF_NP[o.dtype], o.shape) for o in outs],
                                 bufs[3])))
            return outs[0] if n_out == 1 else outs
        finally:
            c._give(bufs)

    def _real_specs(self, specs, ob_addr):
        """specs with each dynamic output's shape replaced by the real one
        mxop_forward wrote into its mxop_array_t record."""
        out = list(specs)
        for j in range(len(out)):
            if j < 64 and (self.dynamic_outputs >> j) & 1:
                rec = MxopArray.from_address(ob_addr + j * _ASZ)
                out[j] = _OutSpec(out[j].dtype, tuple(rec.shape[:rec.ndim]))
        return out

    def _pack_strided(self, ib, inputs, keep, ent):
        """Packs the inputs of an MXOP_OP_STRIDED op: a non-contiguous array
        in shared memory goes with its strides (no copy); anything else as
        _pack_mutated would.  Returns (sig, back, the call entry to use)."""
        c = self.client
        sig = []
        strides = []
        rest = []
        for i, x in enumerate(inputs):
            st = self._shared_strides(x)
            if st is None:
                rest.append(i)
                sig.append(None)
                strides.append(None)
                continue
            a, region, offset = st[0], st[1], st[2]
            code = _MX_OF_NP[a.dtype]
            ndim = a.ndim
            _pack_array(ib, i * _ASZ, a.__array_interface__["data"][0], code, ndim, *a.shape,
                        *_ZPAD[ndim], region, offset, a.nbytes, 0)
            sig.append((code, a.shape))
            arr = (ctypes.c_int64 * max(ndim, 1))(*[s // a.itemsize for s in a.strides])
            keep.append(arr)
            strides.append(arr)
        back = []
        if rest:
            sub, back = self._pack_mutated(ib, inputs, keep, only=rest)
            for i, v in zip(rest, sub):
                sig[i] = v
        ptrs = (ctypes.c_void_p * max(len(inputs), 1))(
            *[_addressof(a) if a is not None else None for a in strides])
        keep.append(ptrs)
        call = ent.call
        strided = _CallEntry(ent.key, ent.pairs, state=call.state, timeout_ms=call.timeout_ms,
                             seed=call.seed)
        strided.call.in_strides = _addressof(ptrs)
        keep.append(strided)
        return tuple(sig), back, strided

    def _shared_strides(self, x):
        """(x, region, offset) when x is a non-contiguous NumPy array with
        non-negative strides inside this client's shared memory, else None."""
        if type(x) is not _ndarray or x.flags.c_contiguous or x.dtype not in _MX_OF_NP \
                or x.ndim > MAX_DIMS or x.size == 0:
            return None
        if any(s < 0 or s % x.itemsize for s in x.strides):
            return None
        if (self.mutated_inputs and not x.flags.writeable):
            return None  # refused with its message by _pack_mutated
        ptr = x.__array_interface__["data"][0]
        extent = sum((d - 1) * s for d, s in zip(x.shape, x.strides)) + x.itemsize
        base = x.base
        while type(base) is _ndarray:
            base = base.base
        b = getattr(base, "_mxop", None)
        if type(b) is _Block and b.client is self.client and \
                b.data <= ptr and ptr + extent <= b.data + b.nbytes:
            return x, b.region, b.offset + (ptr - b.data)
        ro = self.client._region_of(ptr, extent) if self.client._rbase else None
        if ro is None:
            return None
        return x, ro[0], ro[1]

    def _pack_mutated(self, ib, inputs, keep, only=None):
        """Packs the inputs of an op that writes some of them in place.

        A mutated input must be a writable NumPy array: anything else would
        be converted to a temporary copy and the op's writes lost.  One that
        had to be copied to be sent (non-contiguous, foreign byte order) is
        copied back after the call; the pairs (original, copy) are returned
        for that."""
        pack = self.client._pack_np
        sig = []
        back = []
        for i, x in enumerate(inputs):
            if only is not None and i not in only:
                continue
            if not (i < 64 and (self.mutated_inputs >> i) & 1):
                sig.append(pack(ib, i, x, keep))
                continue
            if not isinstance(x, _ndarray):
                raise InvalidArgument(-1001, "op '%s' writes input %d in place; it must be a "
                                      "NumPy array, not %s" % (self.name, i, type(x).__name__))
            if not x.flags.writeable:
                raise InvalidArgument(-1001, "op '%s' writes input %d in place, but that array "
                                      "is read-only (writeable=False)" % (self.name, i))
            n = len(keep)
            sig.append(pack(ib, i, x, keep))
            if len(keep) > n:
                back.append((x, keep[-1]))
        return tuple(sig), back

    def backward(self, ograds, inputs, outputs, needs=None, timeout=None, seed=None,
                 attrs=None, **kw):
        """Gradients of the inputs: in = [ograds, inputs, outputs] as the op's
        backward takes them.  `needs`: a bool per input; False skips that
        gradient (req null) and gives None.  One input: the gradient alone,
        else a tuple."""
        if attrs:
            kw = {**attrs, **kw}
        ent = self._entry(kw, 0, timeout, seed)
        return self._backward_np(ent, ograds, inputs, outputs, needs)

    def _backward_np(self, ent, ograds, inputs, outputs, needs):
        c = self.client
        h = c._handle()
        allin = list(ograds) + list(inputs) + list(outputs)
        n_fwd = len(inputs)
        bufs = c._bufs(len(allin), n_fwd)
        keep = []
        try:
            ib = bufs[0]
            sig = [c._pack_np(ib, i, x, keep) for i, x in enumerate(allin)]
            off = len(ograds)
            ob_addr = bufs[3]
            blocks = []
            for i in range(n_fwd):
                dt, shape = sig[off + i]
                s = _OutSpec(dt, shape)
                b = c._alloc(dt, s.ndim, s.caddr)
                _memmove(ob_addr + i * _ASZ, _addressof(b), _ASZ)
                skip = needs is not None and not needs[i]
                if skip:
                    # The op leaves a req-null output alone; the block is held
                    # until the call returns all the same.
                    ctypes.c_int32.from_address(ob_addr + i * _ASZ + _OFF_REQ).value = \
                        _lib.REQ_NULL
                blocks.append((b, s, skip))
            rc = lib.mxop_backward(h, self._p, ent.addr, bufs[1], len(allin), ob_addr,
                                   n_fwd)
            if rc < 0:
                raise c._error(rc)
            res = tuple(None if skip else c._view(b, s.npdtype, s.shape)
                        for b, s, skip in blocks)
            return res[0] if n_fwd == 1 else res
        finally:
            c._give(bufs)

    # ---- stateful ops -----------------------------------------------------

    def create_state(self, *inputs, attrs=None, **kw):
        """An instance of a stateful op for inputs like these (arrays or
        (shape, dtype) pairs); the attributes are kept with it."""
        if attrs:
            kw = {**attrs, **kw}
        return State(self, kw, tuple(_spec_of(x) for x in inputs))


def _spec_of(x):
    """(mxop dtype, shape) of an array, a tensor or a (shape, dtype) pair."""
    if isinstance(x, tuple) and len(x) == 2 and not hasattr(x, "shape"):
        shape, dtype = x
        if isinstance(shape, int):
            shape = (shape,)
        return dtype_code(dtype), tuple(int(d) for d in shape)
    if hasattr(x, "dtype") and hasattr(x, "shape") and not isinstance(x, _ndarray):
        name = str(x.dtype)  # a tensor's: "torch.float32"
        code = _MX_OF_TORCH_NAME.get(name[6:]) if name.startswith("torch.") else None
        if code is None:
            raise InvalidArgument(-1001, "dtype %s has no mxop equivalent" % name)
        return code, tuple(x.shape)
    x = np.asarray(x)
    return dtype_code(x.dtype), tuple(x.shape)


class BoundOp:
    """An op with its attributes fixed (Op.bind)."""

    def __init__(self, op, ent):
        self.op = op
        self._ent = ent
        self.attrs = dict(ent.pairs)

    def __call__(self, *inputs, out=None):
        return self.op._forward_np(self._ent, inputs, out)

    def backward(self, ograds, inputs, outputs, needs=None):
        return self.op._backward_np(self._ent, ograds, inputs, outputs, needs)

    def __repr__(self):
        return "<mxop.BoundOp %s %r>" % (self.op.name, self.attrs)


_all_states = weakref.WeakSet()


def _states_of(client):
    return [s for s in list(_all_states) if s.op.client is client and s.id]


class State:
    """An instance of a stateful op, living in the worker.

    Call it like the op; backward() like Op.backward.  After a worker crash
    calls raise StateLost; recreate() makes a fresh instance (nothing is
    recreated behind your back).  close() (or garbage collection) destroys it.
    """

    def __init__(self, op, kw, sig):
        self.op = op
        self._kw = dict(kw)
        self._sig = sig
        self.id = 0
        self._create()
        _all_states.add(self)

    def _create(self):
        c = self.op.client
        ent = self.op._entry(self._kw)
        n = len(self._sig)
        dts = (ctypes.c_int32 * max(n, 1))(*[d for d, _ in self._sig])
        shs = (MxopShape * max(n, 1))()
        for i, (_, shape) in enumerate(self._sig):
            shs[i].ndim = len(shape)
            for j, d in enumerate(shape):
                shs[i].dims[j] = d
        sid = ctypes.c_uint64()
        c._check(lib.mxop_state_create(c._handle(), self.op._p, ent.attrs_addr, n,
                                       _addressof(dts), _addressof(shs), ctypes.byref(sid)))
        self.id = sid.value
        self._ent = _CallEntry(ent.pairs, ent.pairs, state=self.id)

    def recreate(self):
        """Replaces the instance by a new one (e.g. after StateLost)."""
        self.close()
        self._create()

    def __call__(self, *inputs, out=None):
        self._alive()
        return self.op._forward_np(self._ent, inputs, out)

    def backward(self, ograds, inputs, outputs, needs=None):
        self._alive()
        return self.op._backward_np(self._ent, ograds, inputs, outputs, needs)

    def _alive(self):
        if not self.id:
            raise InvalidArgument(-1001, "state of op '%s' is closed" % self.op.name)

    def close(self):
        sid, self.id = self.id, 0
        c = self.op.client
        if sid and c._h:
            rc = lib.mxop_state_destroy(c._h, sid)
            # A state lost with a crashed worker is gone already: nothing to undo.
            if rc < 0 and rc not in (-1021, -1022, -1007):
                raise c._error(rc)

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return "<mxop.State %s id=%#x>" % (self.op.name, self.id)
