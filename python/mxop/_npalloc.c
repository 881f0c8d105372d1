/*
 * mxop._npalloc - the C side of mxop.allocator that needs no torch:
 * NumPy's memory handler in mxop shared memory.
 *
 * NumPy's handler (NEP 49): every array data allocation of at least
 * mxop_shared_min_bytes() goes to a block of libmxop's shared heap, which
 * a call passes by reference instead of staging it; smaller ones, and any
 * the heap cannot make, go to the handler that was current at the first
 * enable (NumPy's default).  NumPy keeps the handler with each array and
 * frees through it, so arrays made before, during and after enabling all
 * free correctly.  The handler is a context variable: setting it affects
 * the calling thread's context (and contexts copied from it later), not
 * other threads that already run.
 *
 * Op outputs in warm shared-heap blocks are libmxop's own choice now
 * (mxop_shared_outputs: mxop_array_alloc gives them, mxop_array_free frees
 * either kind), so every call path allocates through libmxop alone.
 * outputs(), adapters() and the third count remain for a package that
 * still asks this module: they answer from libmxop.
 *
 * libmxop's functions come as addresses from the ctypes library the
 * package loaded, so that one libmxop (one heap) serves every path; the
 * few init() is not given are found in the same library (dladdr of one it
 * was given, then dlsym).
 */
#define PY_SSIZE_T_CLEAN
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#include <Python.h>
#include <numpy/arrayobject.h>

#include <dlfcn.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#include "mxop/client.h"

/* libmxop's functions, called through the addresses handed to init(). */
typedef __typeof__(&mxop_shared_alloc) shared_alloc_fn;
typedef __typeof__(&mxop_shared_free) shared_free_fn;
typedef __typeof__(&mxop_shared_contains) shared_contains_fn;
typedef __typeof__(&mxop_shared_min_bytes) min_bytes_fn;
typedef __typeof__(&mxop_shared_outputs) shared_outputs_fn;
typedef __typeof__(&mxop_shared_stats_v2) shared_stats_fn;

static shared_alloc_fn fn_alloc;
static shared_free_fn fn_free;
static shared_contains_fn fn_contains;
static shared_outputs_fn fn_outputs;
static shared_stats_fn fn_stats;
/* mxop_array_alloc and mxop_array_free, as init() gave them: what adapters() answers. */
static void *addr_array_alloc, *addr_array_free;
static size_t min_bytes = 64 * 1024;

static atomic_ullong n_shared;   /* NumPy allocations made in the shared heap */
static atomic_ullong n_fallback; /* large ones the heap could not make */

/* ---- NumPy's handler ---------------------------------------------------- */

/* The handler current at the first enable (a capsule, referenced forever)
 * and its allocator: where small and failed allocations go. */
static PyObject *prev_capsule;
static PyDataMemAllocator prev;

static void *h_malloc(void *ctx, size_t size)
{
    (void)ctx;
    if (size >= min_bytes) {
        void *p = fn_alloc(size);
        if (p != NULL) {
            atomic_fetch_add_explicit(&n_shared, 1, memory_order_relaxed);
            return p;
        }
        atomic_fetch_add_explicit(&n_fallback, 1, memory_order_relaxed);
    }
    return prev.malloc(prev.ctx, size);
}

static void *h_calloc(void *ctx, size_t nelem, size_t elsize)
{
    (void)ctx;
    if (elsize == 0 || nelem <= SIZE_MAX / elsize) {
        size_t size = nelem * elsize;
        if (size >= min_bytes) {
            void *p = fn_alloc(size);
            if (p != NULL) {
                /* A freed block comes back with its last user's bytes. */
                memset(p, 0, size);
                atomic_fetch_add_explicit(&n_shared, 1, memory_order_relaxed);
                return p;
            }
            atomic_fetch_add_explicit(&n_fallback, 1, memory_order_relaxed);
        }
    }
    return prev.calloc(prev.ctx, nelem, elsize);
}

/* The usable size of heap block p: the largest n with [p, p + n) in it
 * (every block made here holds at least min_bytes). */
static size_t block_capacity(void *p)
{
    size_t lo = min_bytes > 0 ? min_bytes : 1, hi = lo * 2;
    while (hi > lo && fn_contains(p, hi))
        lo = hi, hi *= 2;
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (fn_contains(p, mid))
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

static void *h_realloc(void *ctx, void *ptr, size_t new_size)
{
    if (ptr == NULL)
        return h_malloc(ctx, new_size);
    if (!fn_contains(ptr, 1))
        return prev.realloc(prev.ctx, ptr, new_size);
    size_t cap = block_capacity(ptr);
    if (new_size <= cap && new_size > 0)
        return ptr; /* it fits: the block stays */
    void *q = h_malloc(ctx, new_size);
    if (q == NULL)
        return NULL; /* realloc's contract: ptr is untouched */
    memcpy(q, ptr, cap < new_size ? cap : new_size);
    fn_free(ptr);
    return q;
}

static void h_free(void *ctx, void *ptr, size_t size)
{
    (void)ctx;
    if (ptr == NULL)
        return;
    /* mxop_shared_free frees nothing for a pointer that is no block start:
     * such a pointer is the previous handler's. */
    if (fn_free(ptr) == 0)
        return;
    prev.free(prev.ctx, ptr, size);
}

static PyDataMem_Handler handler = {
    "mxop_shared_heap",
    1,
    {NULL, h_malloc, h_calloc, h_realloc, h_free},
};
static PyObject *capsule; /* the handler as NumPy takes it; never freed */

/* ---- libmxop's functions ---------------------------------------------- */

/* The function `name` of the library that holds `known` (a function of libmxop's), or NULL. */
static void *sibling_symbol(void *known, const char *name)
{
    Dl_info info;
    if (dladdr(known, &info) == 0 || info.dli_fname == NULL)
        return NULL;
    /* Already loaded (it holds `known`): this only takes a reference, dropped at once. */
    void *h = dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD);
    if (h == NULL)
        return NULL;
    void *p = dlsym(h, name);
    dlclose(h);
    return p;
}

/* ---- the module ------------------------------------------------------------ */

/* init(alloc, free, contains, min_bytes, alloc_output, array_alloc, array_free):
 * libmxop's functions as addresses (alloc_output is no longer used). */
static PyObject *np_init(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *o[7];
    void *p[7];
    if (!PyArg_ParseTuple(args, "OOOOOOO", &o[0], &o[1], &o[2], &o[3], &o[4], &o[5], &o[6]))
        return NULL;
    for (int i = 0; i < 7; i++) {
        p[i] = PyLong_AsVoidPtr(o[i]);
        if (p[i] == NULL) {
            if (!PyErr_Occurred())
                PyErr_Format(PyExc_ValueError, "init(): address %d is NULL", i);
            return NULL;
        }
    }
    shared_outputs_fn outputs = (shared_outputs_fn)sibling_symbol(p[0], "mxop_shared_outputs");
    shared_stats_fn stats = (shared_stats_fn)sibling_symbol(p[0], "mxop_shared_stats_v2");
    if (outputs == NULL || stats == NULL) {
        PyErr_SetString(PyExc_RuntimeError,
                        "mxop._npalloc: the libmxop given has no mxop_shared_outputs (too old)");
        return NULL;
    }
    fn_alloc = (shared_alloc_fn)p[0];
    fn_free = (shared_free_fn)p[1];
    fn_contains = (shared_contains_fn)p[2];
    min_bytes = ((min_bytes_fn)p[3])();
    fn_outputs = outputs;
    fn_stats = stats;
    addr_array_alloc = p[5];
    addr_array_free = p[6];
    Py_RETURN_NONE;
}

/* enable(): makes the handler the current context's; True if it was not. */
static PyObject *np_enable(PyObject *self, PyObject *noargs)
{
    (void)self;
    (void)noargs;
    if (fn_alloc == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "mxop._npalloc: init() was not called");
        return NULL;
    }
    PyObject *cur = PyDataMem_GetHandler();
    if (cur == NULL)
        return NULL;
    if (cur == capsule) {
        Py_DECREF(cur);
        Py_RETURN_FALSE;
    }
    if (prev_capsule == NULL) {
        PyDataMem_Handler *h = PyCapsule_GetPointer(cur, "mem_handler");
        if (h == NULL) {
            Py_DECREF(cur);
            return NULL;
        }
        prev = h->allocator;
        prev_capsule = cur; /* its reference kept: prev points into it */
    } else {
        Py_DECREF(cur);
    }
    PyObject *old = PyDataMem_SetHandler(capsule);
    if (old == NULL)
        return NULL;
    Py_DECREF(old);
    Py_RETURN_TRUE;
}

/* Whether the current context's handler is this one: 1, 0, or -1 with an exception set. */
static int current_is_ours(void)
{
    PyObject *cur = PyDataMem_GetHandler();
    if (cur == NULL)
        return -1;
    int mine = cur == capsule;
    Py_DECREF(cur);
    return mine;
}

/* disable(): the current context's handler back to the previous one, if it
 * is this one; True if it was. */
static PyObject *np_disable(PyObject *self, PyObject *noargs)
{
    (void)self;
    (void)noargs;
    int mine = current_is_ours();
    if (mine < 0)
        return NULL;
    if (!mine)
        Py_RETURN_FALSE;
    PyObject *old = PyDataMem_SetHandler(prev_capsule);
    if (old == NULL)
        return NULL;
    Py_DECREF(old);
    Py_RETURN_TRUE;
}

/* enabled(): True when the current context's handler is this one. */
static PyObject *np_enabled(PyObject *self, PyObject *noargs)
{
    (void)self;
    (void)noargs;
    int mine = current_is_ours();
    return mine < 0 ? NULL : PyBool_FromLong(mine);
}

/* outputs(on): mxop_shared_outputs(on), outputs in shared-heap blocks (1)
 * or in the arena (0); returns the previous setting. */
static PyObject *np_outputs(PyObject *self, PyObject *arg)
{
    (void)self;
    int on = PyObject_IsTrue(arg);
    if (on < 0)
        return NULL;
    if (fn_outputs == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "mxop._npalloc: init() was not called");
        return NULL;
    }
    return PyBool_FromLong(fn_outputs(on));
}

/* adapters(): the output functions: mxop_array_alloc and mxop_array_free
 * themselves, which give and free shared-heap outputs now. */
static PyObject *np_adapters(PyObject *self, PyObject *noargs)
{
    (void)self;
    (void)noargs;
    if (addr_array_alloc == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "mxop._npalloc: init() was not called");
        return NULL;
    }
    return Py_BuildValue("(NN)", PyLong_FromVoidPtr(addr_array_alloc),
                         PyLong_FromVoidPtr(addr_array_free));
}

/* counts(): (NumPy allocations in the heap, large ones that fell back,
 * outputs made in the heap: mxop_shared_stats_v2's). */
static PyObject *np_counts(PyObject *self, PyObject *noargs)
{
    (void)self;
    (void)noargs;
    mxop_shared_stats_v2_t st;
    memset(&st, 0, sizeof st);
    st.struct_size = sizeof st;
    if (fn_stats != NULL)
        (void)fn_stats(&st);
    return Py_BuildValue("(KKK)", (unsigned long long)atomic_load(&n_shared),
                         (unsigned long long)atomic_load(&n_fallback),
                         (unsigned long long)st.outputs);
}

static PyMethodDef np_methods[] = {
    {"init", np_init, METH_VARARGS,
     "init(alloc, free, contains, min_bytes, alloc_output, "
     "array_alloc, array_free): libmxop's functions"},
    {"enable", np_enable, METH_NOARGS, "NumPy's handler of this context in shared memory"},
    {"disable", np_disable, METH_NOARGS, "this context's previous handler back"},
    {"enabled", np_enabled, METH_NOARGS, "whether this context's handler is mxop's"},
    {"outputs", np_outputs, METH_O,
     "mxop_shared_outputs: op outputs in shared-heap blocks (True) or the arena"},
    {"adapters", np_adapters, METH_NOARGS,
     "addresses of the output alloc and free (libmxop's own)"},
    {"counts", np_counts, METH_NOARGS, "(numpy shared, numpy fallbacks, outputs)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef np_module = {
    PyModuleDef_HEAD_INIT,
    "_npalloc",
    "NumPy's memory handler in mxop shared memory",
    -1,
    np_methods,
    NULL,
    NULL,
    NULL,
    NULL,
};

PyMODINIT_FUNC PyInit__npalloc(void);

PyMODINIT_FUNC PyInit__npalloc(void)
{
    import_array();
    capsule = PyCapsule_New(&handler, "mem_handler", NULL);
    if (capsule == NULL)
        return NULL;
    return PyModule_Create(&np_module);
}
