/*
 * mxop._fastcall - the Python bindings' call path in C.
 *
 * The ctypes path (client.py, torch.py) spends 5-10 us of Python per call:
 * packing each array record with struct, a ctypes call for the output's
 * allocation and another for the call, a ctypes buffer type and an ndarray
 * per output.  This module does the whole of one call in one C function:
 * it reads each input's data pointer, dtype and shape (NumPy arrays through
 * the NumPy C API, torch tensors through their attributes) into a heap
 * array (region 0: libmxop finds the region the bytes lie in, or stages
 * them), allocates the outputs with mxop_array_alloc (the arena, or the
 * shared heap while mxop_shared_outputs is on), makes the call with the
 * GIL released and wraps each output block as an ndarray (and, for torch,
 * a tensor over it).  Dtype codes and sizes come from libmxop
 * (mxop_dtype_info), not from a table here.
 *
 * It calls libmxop through function pointers: mxop_forward and
 * mxop_backward as the Python layer hands them over (taken from the ctypes
 * library it loaded), the rest found in the same library (dladdr of
 * mxop_forward, then dlsym), so that both paths use the one libmxop
 * instance of the process, whichever file $MXOP_LIB named.
 *
 * Anything unusual (non-contiguous arrays, other devices, bf16 outputs,
 * a storage to register, ...) is left to the ctypes path: call() answers
 * NotImplemented before anything is allocated or sent, and the caller
 * takes its ordinary path, which knows every case and its error message.
 */
#define PY_SSIZE_T_CLEAN
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#include <Python.h>
#include <structmember.h>
#include <numpy/arrayobject.h>
/* NumPy 2 hides the descriptor's fields behind this function; NumPy 1 has none. */
#if NPY_ABI_VERSION < 0x02000000
#define PyDataType_ELSIZE(d) ((d)->elsize)
#endif

#include <dlfcn.h>

#include "mxop/client.h"

typedef int (*call_fn)(mxop_client_t *, const mxop_op_t *, const mxop_call_t *,
                       const mxop_array_t *, int, mxop_array_t *, int);
typedef int (*alloc_fn)(mxop_client_t *, int32_t, int32_t, const int64_t *, mxop_array_t *);
typedef void (*free_fn)(mxop_client_t *, mxop_array_t *);
typedef __typeof__(&mxop_dtype_info) dtype_info_fn;
typedef __typeof__(&mxop_region_lookup) lookup_fn;

enum { MODE_NUMPY = 0, MODE_TORCH_FORWARD = 1, MODE_TORCH_BACKWARD = 2, MODE_TORCH_CALL = 3 };
enum { NDTYPES = MXOP_DTYPE_COUNT };

static call_fn fn_forward;
static call_fn fn_backward;
static alloc_fn fn_alloc;
static free_fn fn_free;
static lookup_fn fn_lookup;

/* From libmxop at init: each dtype's size, and its NumPy dtype (NULL for
 * bf16: NumPy has none) by its framework name. */
static size_t dtype_size[NDTYPES];
static PyArray_Descr *np_descr[NDTYPES];

/* The torch half, set by init_torch (NULL until mxop.torch is imported). */
static PyObject *torch_tensor_type;
static PyObject *torch_from_numpy;
static PyObject *torch_strided;
static PyObject *torch_codes;        /* {torch dtype: mxop code} */
static PyObject *torch_settle;       /* torch._settle(client, rc) */
static PyObject *inflight;           /* _interrupt.inflight, a list of one int */
static PyObject *torch_grad_enabled; /* torch.is_grad_enabled */
static PyObject *torch_tracing;      /* torch._C._get_tracing_state */
static PyObject *storage_region;     /* _torch_storage.region_of(client, tensor), or NULL */

static PyObject *s_h, *s_live, *s_close_pending, *s_finish_close, *s_infer, *s_specs, *s_pairs,
    *s_addr, *s_p, *s_dtype, *s_shape, *s_nbytes, *s_wpid, *s_data_ptr, *s_is_contiguous, *s_is_cpu,
    *s_layout, *s_is_shared, *s_error, *s_dict, *s_requires_grad;

/* ---- blocks: one arena allocation, the base of the arrays viewing it ---- */

typedef struct {
    PyObject_HEAD PyObject *client; /* the mxop.Client; NULL once freed */
    mxop_array_t a;
} Block;

static void block_dealloc(PyObject *self)
{
    Block *b = (Block *)self;
    PyObject *c = b->client;
    if (c != NULL) {
        /* Exactly what client._Block.__del__ does: free the block while the
         * session lives (a forked child's copy has no session), count it,
         * and end a close that waited for the last block. */
        PyObject *et, *ev, *tb;
        PyErr_Fetch(&et, &ev, &tb);
        PyObject *h = PyObject_GetAttr(c, s_h);
        int open = h != NULL && PyObject_IsTrue(h) == 1;
        /* A shared-heap block (mxop.allocator's outputs) needs no session. */
        int heap = b->a.region == MXOP_REGION_HEAP;
        if (open || heap) {
            void *hp = open ? PyLong_AsVoidPtr(h) : NULL;
            /* Without the GIL, as ctypes calls: libmxop may wait for the
             * client's lock while another thread's call holds it. */
            if (hp != NULL || heap) {
                Py_BEGIN_ALLOW_THREADS fn_free(hp, &b->a);
                Py_END_ALLOW_THREADS
            }
        }
        Py_XDECREF(h);
        PyObject *live = PyObject_GetAttr(c, s_live);
        long n = live != NULL ? PyLong_AsLong(live) - 1 : -1;
        Py_XDECREF(live);
        if (n >= 0) {
            PyObject *v = PyLong_FromLong(n);
            if (v != NULL) {
                PyObject_SetAttr(c, s_live, v);
                Py_DECREF(v);
            }
            if (n == 0) {
                PyObject *cp = PyObject_GetAttr(c, s_close_pending);
                if (cp != NULL && PyObject_IsTrue(cp) == 1) {
                    PyObject *r = PyObject_CallMethodNoArgs(c, s_finish_close);
                    Py_XDECREF(r);
                }
                Py_XDECREF(cp);
            }
        }
        PyErr_Clear();
        PyErr_Restore(et, ev, tb);
        b->client = NULL;
        Py_DECREF(c);
    }
    Py_TYPE(self)->tp_free(self);
}

static int block_getbuffer(PyObject *self, Py_buffer *view, int flags)
{
    Block *b = (Block *)self;
    return PyBuffer_FillInfo(view, self, b->a.data, (Py_ssize_t)b->a.nbytes, 0, flags);
}

static PyBufferProcs block_as_buffer = {block_getbuffer, NULL};

static PyObject *block_get_data(PyObject *self, void *closure)
{
    return PyLong_FromVoidPtr(((Block *)self)->a.data);
}

static PyObject *block_get_mxop(PyObject *self, void *closure)
{
    /* Arrays viewing a block find it as base._mxop, as for ctypes blocks. */
    Py_INCREF(self);
    return self;
}

static PyGetSetDef block_getset[] = {
    {"data", block_get_data, NULL, "address of the block's memory", NULL},
    {"_mxop", block_get_mxop, NULL, "the block itself", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMemberDef block_members[] = {
    {"client", T_OBJECT, offsetof(Block, client), READONLY, "the mxop.Client"},
    {"dtype", T_INT, offsetof(Block, a) + offsetof(mxop_array_t, dtype), READONLY, NULL},
    {"region", T_UINT, offsetof(Block, a) + offsetof(mxop_array_t, region), READONLY, NULL},
    {"offset", T_ULONGLONG, offsetof(Block, a) + offsetof(mxop_array_t, offset), READONLY, NULL},
    {"nbytes", T_PYSSIZET, offsetof(Block, a) + offsetof(mxop_array_t, nbytes), READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject BlockType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "mxop._fastcall.Block",
    .tp_basicsize = sizeof(Block),
    .tp_dealloc = block_dealloc,
    .tp_as_buffer = &block_as_buffer,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "One arena allocation of a client (returned to the arena when garbage).",
    .tp_getset = block_getset,
    .tp_members = block_members,
};

/* ---- helpers ----------------------------------------------------------- */

/* The mxop dtype of a NumPy array's elements, or -1 for one mxop has not. */
static int np_code(PyArrayObject *a)
{
    PyArray_Descr *d = PyArray_DESCR(a);
    if (!PyArray_ISNBO(d->byteorder))
        return -1;
    for (int code = 0; code < NDTYPES; code++)
        if (np_descr[code] != NULL && np_descr[code]->type_num == d->type_num)
            return code;
    /* A signed integer NumPy numbers otherwise (long long beside long) but of the same size. */
    if (PyTypeNum_ISSIGNED(d->type_num) && PyTypeNum_ISINTEGER(d->type_num))
        for (int code = 0; code < NDTYPES; code++)
            if (np_descr[code] != NULL && PyTypeNum_ISSIGNED(np_descr[code]->type_num) &&
                PyTypeNum_ISINTEGER(np_descr[code]->type_num) &&
                (size_t)PyArray_ITEMSIZE(a) == dtype_size[code])
                return code;
    return -1;
}

/* The truth of attribute `name` of `o` (called when `call`): 1, 0, -1 on error. */
static int attr_true(PyObject *o, PyObject *name, int call)
{
    PyObject *v = call ? PyObject_CallMethodNoArgs(o, name) : PyObject_GetAttr(o, name);
    if (v == NULL)
        return -1;
    int r = PyObject_IsTrue(v);
    Py_DECREF(v);
    return r;
}

/* The truth of fn(): 1, 0, -1 on error. */
static int attr_true_call(PyObject *fn)
{
    PyObject *v = PyObject_CallNoArgs(fn);
    if (v == NULL)
        return -1;
    int r = PyObject_IsTrue(v);
    Py_DECREF(v);
    return r;
}

/*
 * Writes the record of input `x` (a heap array: libmxop resolves its
 * region); *sig gets (dtype code, shape).  Returns 0, 1 (leave this call
 * to the ctypes path) or -1 (error).
 */
static int pack_one(PyObject *client, mxop_client_t *h, PyObject *x, mxop_array_t *rec,
                    PyObject **sig, int torch)
{
    uint32_t region = MXOP_REGION_HEAP;
    uint64_t offset = 0;
    int code;
    int ndim;
    int64_t shape[MXOP_MAX_DIMS];
    uintptr_t ptr;
    int is_tensor = 0;

    if (PyArray_CheckExact(x)) {
        PyArrayObject *a = (PyArrayObject *)x;
        code = np_code(a);
        ndim = PyArray_NDIM(a);
        if (code < 0 || ndim > MXOP_MAX_DIMS || !PyArray_IS_C_CONTIGUOUS(a))
            return 1;
        for (int i = 0; i < ndim; i++)
            shape[i] = PyArray_DIMS(a)[i];
        ptr = (uintptr_t)PyArray_DATA(a);
    } else if (torch && torch_tensor_type != NULL &&
               PyObject_TypeCheck(x, (PyTypeObject *)torch_tensor_type)) {
        is_tensor = 1;
        PyObject *layout = PyObject_GetAttr(x, s_layout);
        if (layout == NULL)
            return -1;
        Py_DECREF(layout);
        if (layout != torch_strided)
            return 1;
        int r = attr_true(x, s_is_cpu, 0);
        if (r <= 0)
            return r < 0 ? -1 : 1;
        PyObject *dt = PyObject_GetAttr(x, s_dtype);
        if (dt == NULL)
            return -1;
        PyObject *cv = PyDict_GetItemWithError(torch_codes, dt);
        Py_DECREF(dt);
        if (cv == NULL)
            return PyErr_Occurred() ? -1 : 1;
        code = (int)PyLong_AsLong(cv);
        PyObject *sh = PyObject_GetAttr(x, s_shape);
        if (sh == NULL)
            return -1;
        if (!PyTuple_Check(sh) || PyTuple_GET_SIZE(sh) > MXOP_MAX_DIMS) {
            Py_DECREF(sh);
            return 1;
        }
        ndim = (int)PyTuple_GET_SIZE(sh);
        for (int i = 0; i < ndim; i++)
            shape[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(sh, i));
        Py_DECREF(sh);
        if (PyErr_Occurred())
            return -1;
        r = attr_true(x, s_is_contiguous, 1);
        if (r <= 0)
            return r < 0 ? -1 : 1;
        PyObject *p = PyObject_CallMethodNoArgs(x, s_data_ptr);
        if (p == NULL)
            return -1;
        ptr = (uintptr_t)PyLong_AsVoidPtr(p);
        Py_DECREF(p);
        if (PyErr_Occurred())
            return -1;
    } else {
        return 1;
    }
    if (code < 0 || code >= NDTYPES)
        return 1;
    size_t nbytes = dtype_size[code];
    for (int i = 0; i < ndim; i++)
        nbytes *= (size_t)shape[i];
    if (is_tensor && nbytes > 0 && fn_lookup(h, (const void *)ptr, nbytes, NULL, NULL) == 0) {
        /*
         * A shared storage (a DataLoader batch, share_memory_()) is no region
         * of libmxop's: libmxop is never told where a storage lies, so that a
         * dead one's address cannot be taken for its region.  mxop.torch's
         * storage registry gives (region, offset) for a live one, registering
         * it on first use; when it cannot, the ctypes path stages the tensor.
         */
        int sh = attr_true(x, s_is_shared, 1);
        if (sh != 0) {
            if (sh < 0 || storage_region == NULL)
                return sh < 0 ? -1 : 1;
            PyObject *ro = PyObject_CallFunctionObjArgs(storage_region, client, x, NULL);
            if (ro == NULL)
                return -1;
            unsigned long rid = 0;
            unsigned long long off = 0;
            int ok = PyTuple_Check(ro) && PyArg_ParseTuple(ro, "kK", &rid, &off);
            Py_DECREF(ro);
            if (!ok) {
                PyErr_Clear(); /* None: the ctypes path stages it */
                return 1;
            }
            region = (uint32_t)rid;
            offset = (uint64_t)off;
        }
    }
    memset(rec, 0, sizeof *rec);
    rec->data = (void *)ptr;
    rec->dtype = code;
    rec->ndim = ndim;
    memcpy(rec->shape, shape, sizeof(int64_t) * (size_t)ndim);
    rec->region = region;
    rec->offset = offset;
    rec->nbytes = nbytes;
    PyObject *st = PyTuple_New(ndim);
    if (st == NULL)
        return -1;
    for (int i = 0; i < ndim; i++) {
        PyObject *d = PyLong_FromLongLong(shape[i]);
        if (d == NULL) {
            Py_DECREF(st);
            return -1;
        }
        PyTuple_SET_ITEM(st, i, d);
    }
    *sig = Py_BuildValue("(iN)", code, st);
    return *sig != NULL ? 0 : -1;
}

/* An output to allocate: its dtype and shape. */
typedef struct {
    int32_t dtype;
    int32_t ndim;
    int64_t shape[MXOP_MAX_DIMS];
} spec_t;

/* Reads an _OutSpec (dtype, shape); returns 0, 1 (ctypes path) or -1. */
static int read_spec(PyObject *s, spec_t *out)
{
    PyObject *dt = PyObject_GetAttr(s, s_dtype);
    if (dt == NULL)
        return -1;
    long code = PyLong_AsLong(dt);
    Py_DECREF(dt);
    PyObject *sh = PyObject_GetAttr(s, s_shape);
    if (sh == NULL)
        return -1;
    int r = 0;
    if (code < 0 || code >= NDTYPES || np_descr[code] == NULL || !PyTuple_Check(sh) ||
        PyTuple_GET_SIZE(sh) > MXOP_MAX_DIMS) {
        r = PyErr_Occurred() ? -1 : 1;
    } else {
        out->dtype = (int32_t)code;
        out->ndim = (int32_t)PyTuple_GET_SIZE(sh);
        for (int i = 0; i < out->ndim; i++)
            out->shape[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(sh, i));
        if (PyErr_Occurred())
            r = -1;
    }
    Py_DECREF(sh);
    return r;
}

static int spec_empty(const spec_t *s)
{
    for (int i = 0; i < s->ndim; i++)
        if (s->shape[i] == 0)
            return 1;
    return 0;
}

/* Raises the call's error: client._error(rc) (NumPy), torch._settle (torch). */
static void raise_rc(PyObject *client, int rc, int mode)
{
    if (mode != MODE_NUMPY && torch_settle != NULL) {
        PyObject *r = PyObject_CallFunction(torch_settle, "Oi", client, rc);
        Py_XDECREF(r);
        if (r != NULL)
            PyErr_Format(PyExc_RuntimeError, "mxop: call failed with %d", rc);
        return;
    }
    PyObject *e = PyObject_CallMethod(client, "_error", "i", rc);
    if (e != NULL) {
        PyErr_SetObject((PyObject *)Py_TYPE(e), e);
        Py_DECREF(e);
    }
}

static int add_live(PyObject *client, long d)
{
    PyObject *live = PyObject_GetAttr(client, s_live);
    if (live == NULL)
        return -1;
    long n = PyLong_AsLong(live);
    Py_DECREF(live);
    if (n == -1 && PyErr_Occurred())
        return -1;
    PyObject *v = PyLong_FromLong(n + d);
    if (v == NULL)
        return -1;
    int rc = PyObject_SetAttr(client, s_live, v);
    Py_DECREF(v);
    return rc;
}

static int set_inflight(long pid)
{
    if (inflight == NULL || !PyList_Check(inflight) || PyList_GET_SIZE(inflight) < 1)
        return 0;
    PyObject *v = PyLong_FromLong(pid);
    return v != NULL ? PyList_SetItem(inflight, 0, v) : -1;
}

/* An ndarray (and, for torch, a tensor) viewing block b; steals b. */
static PyObject *view_of(Block *b, int torch)
{
    npy_intp dims[MXOP_MAX_DIMS];
    for (int i = 0; i < b->a.ndim; i++)
        dims[i] = (npy_intp)b->a.shape[i];
    PyArray_Descr *d = np_descr[b->a.dtype];
    Py_INCREF(d);
    PyObject *arr = PyArray_NewFromDescr(&PyArray_Type, d, b->a.ndim, dims, NULL, b->a.data,
                                         NPY_ARRAY_CARRAY, NULL);
    if (arr == NULL) {
        Py_DECREF(b);
        return NULL;
    }
    if (PyArray_SetBaseObject((PyArrayObject *)arr, (PyObject *)b) < 0) {
        Py_DECREF(arr);
        return NULL;
    }
    if (!torch)
        return arr;
    PyObject *t = PyObject_CallOneArg(torch_from_numpy, arr);
    Py_DECREF(arr);
    return t;
}

/* 1 when a TorchOp call needs the Python path: torch.jit.trace is
 * recording, or grad is on and an input requires grad; 0 if not; -1. */
static int needs_python(PyObject *inputs)
{
    if (torch_tracing == NULL || torch_grad_enabled == NULL)
        return 1;
    PyObject *ts = PyObject_CallNoArgs(torch_tracing);
    if (ts == NULL)
        return -1;
    Py_DECREF(ts);
    if (ts != Py_None)
        return 1;
    int g = attr_true_call(torch_grad_enabled);
    if (g <= 0)
        return g;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(inputs); i++) {
        PyObject *x = PyTuple_GET_ITEM(inputs, i);
        if (!PyObject_TypeCheck(x, (PyTypeObject *)torch_tensor_type))
            continue;
        int r = attr_true(x, s_requires_grad, 0);
        if (r != 0)
            return r;
    }
    return 0;
}

/*
 * call(client, op, ent, inputs, mode, needs, off)
 *
 * One call of `op` (an mxop.Op, or what torch's _Fn takes for a state)
 * with call entry `ent` (a client._CallEntry) on `inputs` (a tuple):
 *   mode 0: forward on NumPy arrays; returns the output, or a tuple of them;
 *   mode 1: forward on tensors; returns a tuple of tensors;
 *   mode 2: backward on tensors, inputs = grads + forward inputs + outputs,
 *           `needs` a bool per forward input, `off` the number of grads;
 *           returns a tuple of input gradients (None where not needed);
 *   mode 3: a TorchOp's call: mode 1 when neither autograd nor tracing is
 *           involved (else NotImplemented), one output returned alone.
 * NotImplemented: the ctypes path must take this call (nothing was done).
 */
static PyObject *fc_call(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 7) {
        PyErr_SetString(PyExc_TypeError, "call(client, op, ent, inputs, mode, needs, off)");
        return NULL;
    }
    PyObject *client = args[0], *op = args[1], *ent = args[2], *inputs = args[3];
    int mode = (int)PyLong_AsLong(args[4]);
    PyObject *needs = args[5];
    Py_ssize_t off = PyLong_AsSsize_t(args[6]);
    if (PyErr_Occurred())
        return NULL;
    if (!PyTuple_Check(inputs) || (mode != MODE_NUMPY && torch_tensor_type == NULL) ||
        fn_forward == NULL)
        Py_RETURN_NOTIMPLEMENTED;
    Py_ssize_t n_in = PyTuple_GET_SIZE(inputs);
    if (n_in > MXOP_MAX_TENSORS)
        Py_RETURN_NOTIMPLEMENTED;
    if (mode == MODE_TORCH_CALL) {
        /* TorchOp.__call__ without autograd or tracing: anything else (an
         * input requiring grad with grad on, torch.jit.trace running) is
         * for the Python path. */
        int r = needs_python(inputs);
        if (r != 0)
            return r < 0 ? NULL : Py_NewRef(Py_NotImplemented);
    }

    PyObject *result = NULL, *sig = NULL, *specs = NULL, *hobj = NULL;
    Block *blocks[MXOP_MAX_TENSORS] = {0};
    mxop_array_t in[MXOP_MAX_TENSORS];
    mxop_array_t out[MXOP_MAX_TENSORS];
    spec_t sp[MXOP_MAX_TENSORS];
    Py_ssize_t n_out = 0;

    hobj = PyObject_GetAttr(client, s_h);
    if (hobj == NULL)
        return NULL;
    int cp = attr_true(client, s_close_pending, 0);
    if (cp < 0)
        goto done;
    if (hobj == Py_None || cp || PyObject_IsTrue(hobj) != 1) {
        result = Py_NewRef(Py_NotImplemented); /* closed: the ctypes path raises */
        goto done;
    }
    mxop_client_t *h = PyLong_AsVoidPtr(hobj);
    PyObject *pobj = PyObject_GetAttr(op, s_p);
    if (pobj == NULL)
        goto done;
    const mxop_op_t *opp = PyLong_AsVoidPtr(pobj);
    Py_DECREF(pobj);
    PyObject *aobj = PyObject_GetAttr(ent, s_addr);
    if (aobj == NULL)
        goto done;
    const mxop_call_t *callp = PyLong_AsVoidPtr(aobj);
    Py_DECREF(aobj);
    if (PyErr_Occurred())
        goto done;

    /* Inputs. */
    sig = PyTuple_New(n_in);
    if (sig == NULL)
        goto done;
    for (Py_ssize_t i = 0; i < n_in; i++) {
        PyObject *item = NULL;
        int r = pack_one(client, h, PyTuple_GET_ITEM(inputs, i), &in[i], &item, mode != MODE_NUMPY);
        if (r < 0)
            goto done;
        if (r > 0) {
            result = Py_NewRef(Py_NotImplemented);
            goto done;
        }
        PyTuple_SET_ITEM(sig, i, item);
    }

    /* Outputs: inferred (cached per signature in op._infer), or for
     * backward the forward inputs' dtypes and shapes. */
    if (mode == MODE_TORCH_BACKWARD) {
        if (!PyTuple_Check(needs)) {
            result = Py_NewRef(Py_NotImplemented);
            goto done;
        }
        n_out = PyTuple_GET_SIZE(needs);
        if (off < 0 || off + n_out > n_in) {
            PyErr_SetString(PyExc_ValueError, "backward: inputs and needs do not match");
            goto done;
        }
        for (Py_ssize_t i = 0; i < n_out; i++) {
            sp[i].dtype = in[off + i].dtype;
            sp[i].ndim = in[off + i].ndim;
            memcpy(sp[i].shape, in[off + i].shape, sizeof sp[i].shape);
        }
    } else {
        PyObject *infer = PyObject_GetAttr(op, s_infer);
        if (infer != NULL && PyDict_Check(infer)) {
            PyObject *pairs = PyObject_GetAttr(ent, s_pairs);
            PyObject *key = pairs != NULL ? PyTuple_Pack(2, pairs, sig) : NULL;
            Py_XDECREF(pairs);
            if (key != NULL) {
                specs = PyDict_GetItemWithError(infer, key);
                Py_XINCREF(specs);
                Py_DECREF(key);
            }
        }
        Py_XDECREF(infer);
        if (PyErr_Occurred())
            PyErr_Clear(); /* no cache here: ask _specs */
        if (specs == NULL) {
            specs = PyObject_CallMethodObjArgs(op, s_specs, ent, sig, NULL);
            if (specs == NULL)
                goto done;
        }
        if (!PyTuple_Check(specs) || PyTuple_GET_SIZE(specs) > MXOP_MAX_TENSORS) {
            result = Py_NewRef(Py_NotImplemented);
            goto done;
        }
        n_out = PyTuple_GET_SIZE(specs);
        for (Py_ssize_t i = 0; i < n_out; i++) {
            int r = read_spec(PyTuple_GET_ITEM(specs, i), &sp[i]);
            if (r < 0)
                goto done;
            if (r > 0) {
                result = Py_NewRef(Py_NotImplemented);
                goto done;
            }
        }
    }
    for (Py_ssize_t i = 0; i < n_out; i++) {
        if (np_descr[sp[i].dtype] == NULL || spec_empty(&sp[i])) {
            result = Py_NewRef(Py_NotImplemented); /* bf16, zero-size: ctypes path */
            goto done;
        }
    }

    /* Allocate the outputs (the arena, or the shared heap: libmxop's choice). */
    for (Py_ssize_t i = 0; i < n_out; i++) {
        Block *b = PyObject_New(Block, &BlockType);
        if (b == NULL)
            goto done;
        b->client = NULL;
        memset(&b->a, 0, sizeof b->a);
        blocks[i] = b;
        int rc;
        Py_BEGIN_ALLOW_THREADS /* it may wait for the client's lock (see block_dealloc) */
            rc = fn_alloc(h, sp[i].dtype, sp[i].ndim, sp[i].shape, &b->a);
        Py_END_ALLOW_THREADS if (rc < 0)
        {
            raise_rc(client, rc, MODE_NUMPY);
            goto done;
        }
        b->client = Py_NewRef(client);
        if (add_live(client, 1) < 0)
            goto done;
        out[i] = b->a;
        if (mode == MODE_TORCH_BACKWARD) {
            int nd = PyObject_IsTrue(PyTuple_GET_ITEM(needs, i));
            if (nd < 0)
                goto done;
            if (!nd)
                out[i].req = MXOP_REQ_NULL;
        }
    }

    /* The call, with the GIL released; Ctrl-C kills the worker in flight. */
    long wpid = 0;
    PyObject *cdict = NULL;
    if (mode != MODE_NUMPY) {
        cdict = PyObject_GetAttr(client, s_dict);
        if (cdict == NULL)
            goto done;
        PyObject *w = PyDict_GetItemWithError(cdict, s_wpid);
        wpid = w != NULL ? PyLong_AsLong(w) : 0;
        if (PyErr_Occurred() || set_inflight(wpid) < 0) {
            Py_DECREF(cdict);
            goto done;
        }
    }
    call_fn fn = mode == MODE_TORCH_BACKWARD ? fn_backward : fn_forward;
    int rc;
    Py_BEGIN_ALLOW_THREADS rc = fn(h, opp, callp, in, (int)n_in, out, (int)n_out);
    Py_END_ALLOW_THREADS if (mode != MODE_NUMPY)
    {
        set_inflight(0);
        Py_DECREF(cdict);
    }
    if (rc < 0) {
        raise_rc(client, rc, mode);
        goto done;
    }
    if (mode != MODE_NUMPY && wpid == 0) {
        /* The worker's pid is not known yet: _settle looks it up. */
        PyObject *r = PyObject_CallFunction(torch_settle, "Oi", client, rc);
        if (r == NULL)
            goto done;
        Py_DECREF(r);
    }

    /* Views of the outputs. */
    if ((mode == MODE_NUMPY || mode == MODE_TORCH_CALL) && n_out == 1) {
        result = view_of(blocks[0], mode == MODE_TORCH_CALL);
        blocks[0] = NULL;
        goto done;
    }
    PyObject *tup = PyTuple_New(n_out);
    if (tup == NULL)
        goto done;
    for (Py_ssize_t i = 0; i < n_out; i++) {
        PyObject *v;
        if (mode == MODE_TORCH_BACKWARD && out[i].req == MXOP_REQ_NULL) {
            v = Py_NewRef(Py_None);
            Py_DECREF(blocks[i]);
        } else {
            v = view_of(blocks[i], mode != MODE_NUMPY);
        }
        blocks[i] = NULL;
        if (v == NULL) {
            Py_DECREF(tup);
            goto done;
        }
        PyTuple_SET_ITEM(tup, i, v);
    }
    result = tup;
done:
    for (Py_ssize_t i = 0; i < MXOP_MAX_TENSORS && i < (n_out > 0 ? n_out : 0); i++)
        Py_XDECREF(blocks[i]);
    Py_XDECREF(specs);
    Py_XDECREF(sig);
    Py_XDECREF(hobj);
    return result;
}

/* ---- set-up -------------------------------------------------------------- */

static void *addr_of(PyObject *o)
{
    return o == Py_None ? NULL : PyLong_AsVoidPtr(o);
}

/* The function `name` of the library that holds `known` (a function of libmxop's), or NULL. */
static void *sibling_symbol(void *known, const char *name)
{
    Dl_info info;
    if (dladdr(known, &info) == 0 || info.dli_fname == NULL)
        return NULL;
    /* Already loaded (it holds `known`): this only takes a reference, dropped at once. */
    void *lib = dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD);
    if (lib == NULL)
        return NULL;
    void *p = dlsym(lib, name);
    dlclose(lib);
    return p;
}

/*
 * init(forward, backward[, alloc, free, descrs]): mxop_forward and
 * mxop_backward as addresses (ctypes.cast(lib.mxop_forward, c_void_p).value).
 * The rest of libmxop's functions are found in the library that holds
 * mxop_forward, and the dtypes come from it (mxop_dtype_info); the optional
 * arguments, which an older package passes, are accepted and not used:
 * outputs are always mxop_array_alloc's (which gives shared-heap blocks
 * while mxop_shared_outputs is on) and freed by mxop_array_free.
 */
static PyObject *fc_init(PyObject *self, PyObject *args)
{
    PyObject *f, *b, *unused_alloc = NULL, *unused_free = NULL, *unused_descrs = NULL;
    if (!PyArg_ParseTuple(args, "OO|OOO", &f, &b, &unused_alloc, &unused_free, &unused_descrs))
        return NULL;
    void *pf = addr_of(f), *pb = addr_of(b);
    if (PyErr_Occurred())
        return NULL;
    if (!pf || !pb) {
        PyErr_SetString(PyExc_ValueError, "init: mxop_forward and mxop_backward must be given");
        return NULL;
    }
    void *pa = sibling_symbol(pf, "mxop_array_alloc");
    void *pfr = sibling_symbol(pf, "mxop_array_free");
    void *pl = sibling_symbol(pf, "mxop_region_lookup");
    dtype_info_fn info = (dtype_info_fn)sibling_symbol(pf, "mxop_dtype_info");
    if (!pa || !pfr || !pl || !info) {
        PyErr_SetString(PyExc_RuntimeError,
                        "init: the libmxop that holds mxop_forward has no mxop_region_lookup or "
                        "mxop_dtype_info (too old)");
        return NULL;
    }
    size_t sizes[NDTYPES];
    PyArray_Descr *descrs[NDTYPES] = {NULL};
    for (int code = 0; code < NDTYPES; code++) {
        const char *name = NULL;
        if (info(code, NULL, &name, &sizes[code]) != 0 || sizes[code] == 0) {
            PyErr_Format(PyExc_RuntimeError, "init: libmxop does not know dtype %d", code);
            goto err;
        }
        /* A dtype NumPy has not (bfloat16) has no descriptor: such outputs take the ctypes path. */
        PyObject *n = PyUnicode_FromString(name);
        if (n == NULL)
            goto err;
        if (!PyArray_DescrConverter2(n, &descrs[code]))
            PyErr_Clear();
        Py_DECREF(n);
        /* Only NumPy's own types: a user-defined one (ml_dtypes' bfloat16, registered when
         * jax is imported) is no type torch.from_numpy takes. */
        if (descrs[code] != NULL && (PyTypeNum_ISUSERDEF(descrs[code]->type_num) ||
                                     (size_t)PyDataType_ELSIZE(descrs[code]) != sizes[code]))
            Py_CLEAR(descrs[code]);
    }
    for (int code = 0; code < NDTYPES; code++) {
        dtype_size[code] = sizes[code];
        Py_XSETREF(np_descr[code], descrs[code]);
    }
    fn_forward = (call_fn)pf;
    fn_backward = (call_fn)pb;
    fn_alloc = (alloc_fn)pa;
    fn_free = (free_fn)pfr;
    fn_lookup = (lookup_fn)pl;
    Py_RETURN_NONE;

err:
    for (int code = 0; code < NDTYPES; code++)
        Py_XDECREF(descrs[code]);
    return NULL;
}

/* set_forward(address) -> the previous address (for the bench's stub). */
static PyObject *fc_set_forward(PyObject *self, PyObject *arg)
{
    void *p = PyLong_AsVoidPtr(arg);
    if (p == NULL) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "set_forward: NULL");
        return NULL;
    }
    PyObject *old = PyLong_FromVoidPtr((void *)fn_forward);
    fn_forward = (call_fn)p;
    return old;
}

/* set_backward(address) -> the previous address (for the bench's stub). */
static PyObject *fc_set_backward(PyObject *self, PyObject *arg)
{
    void *p = PyLong_AsVoidPtr(arg);
    if (p == NULL) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "set_backward: NULL");
        return NULL;
    }
    PyObject *old = PyLong_FromVoidPtr((void *)fn_backward);
    fn_backward = (call_fn)p;
    return old;
}

/* init_torch(Tensor, from_numpy, strided, codes, settle, inflight,
 *            is_grad_enabled, tracing_state). */
static PyObject *fc_init_torch(PyObject *self, PyObject *args)
{
    PyObject *tt, *fn, *st, *codes, *settle, *infl, *ge, *tr, *sr = Py_None;
    if (!PyArg_ParseTuple(args, "OOOO!OO!OO|O", &tt, &fn, &st, &PyDict_Type, &codes, &settle,
                          &PyList_Type, &infl, &ge, &tr, &sr))
        return NULL;
    if (sr != Py_None && !PyCallable_Check(sr)) {
        PyErr_SetString(PyExc_TypeError, "init_torch: storage_region must be callable or None");
        return NULL;
    }
    if (!PyType_Check(tt) || !PyCallable_Check(fn) || !PyCallable_Check(settle) ||
        !PyCallable_Check(ge) || !PyCallable_Check(tr)) {
        PyErr_SetString(PyExc_TypeError, "init_torch: Tensor type and callables expected");
        return NULL;
    }
    Py_XSETREF(torch_tensor_type, Py_NewRef(tt));
    Py_XSETREF(torch_from_numpy, Py_NewRef(fn));
    Py_XSETREF(torch_strided, Py_NewRef(st));
    Py_XSETREF(torch_codes, Py_NewRef(codes));
    Py_XSETREF(torch_settle, Py_NewRef(settle));
    Py_XSETREF(inflight, Py_NewRef(infl));
    Py_XSETREF(torch_grad_enabled, Py_NewRef(ge));
    Py_XSETREF(torch_tracing, Py_NewRef(tr));
    Py_XSETREF(storage_region, sr != Py_None ? Py_NewRef(sr) : NULL);
    Py_RETURN_NONE;
}

static PyMethodDef fc_methods[] = {
    {"call", (PyCFunction)(void (*)(void))fc_call, METH_FASTCALL,
     "call(client, op, ent, inputs, mode, needs, off): one call, or NotImplemented"},
    {"init", fc_init, METH_VARARGS,
     "init(forward, backward[, alloc, free, descrs]): libmxop's functions (the optional "
     "arguments are not used)"},
    {"init_torch", fc_init_torch, METH_VARARGS,
     "init_torch(Tensor, from_numpy, strided, codes, settle, inflight, is_grad_enabled, "
     "tracing_state[, storage_region])"},
    {"set_forward", fc_set_forward, METH_O, "set_forward(address) -> previous address"},
    {"set_backward", fc_set_backward, METH_O, "set_backward(address) -> previous address"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef fc_module = {
    PyModuleDef_HEAD_INIT,
    "_fastcall",
    "The Python bindings' call path in C (see python/mxop/_fastcall.c).",
    -1,
    fc_methods,
    NULL,
    NULL,
    NULL,
    NULL,
};

#define INTERN(var, text)                                                                          \
    do {                                                                                           \
        if ((var = PyUnicode_InternFromString(text)) == NULL)                                      \
            return NULL;                                                                           \
    } while (0)

PyMODINIT_FUNC PyInit__fastcall(void);

PyMODINIT_FUNC PyInit__fastcall(void)
{
    import_array();
    if (PyType_Ready(&BlockType) < 0)
        return NULL;
    INTERN(s_h, "_h");
    INTERN(s_live, "_live");
    INTERN(s_close_pending, "_close_pending");
    INTERN(s_finish_close, "_finish_close");
    INTERN(s_infer, "_infer");
    INTERN(s_specs, "_specs");
    INTERN(s_pairs, "pairs");
    INTERN(s_addr, "addr");
    INTERN(s_p, "_p");
    INTERN(s_dtype, "dtype");
    INTERN(s_shape, "shape");
    INTERN(s_nbytes, "nbytes");
    INTERN(s_wpid, "_wpid");
    INTERN(s_data_ptr, "data_ptr");
    INTERN(s_is_contiguous, "is_contiguous");
    INTERN(s_is_cpu, "is_cpu");
    INTERN(s_layout, "layout");
    INTERN(s_is_shared, "is_shared");
    INTERN(s_error, "_error");
    INTERN(s_dict, "__dict__");
    INTERN(s_requires_grad, "requires_grad");
    PyObject *m = PyModule_Create(&fc_module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&BlockType);
    if (PyModule_AddObject(m, "Block", (PyObject *)&BlockType) < 0) {
        Py_DECREF(&BlockType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
