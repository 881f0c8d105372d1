/*
 * client/invoke.c - the data plane's calls: forward, backward, inference
 * and op state, straight to the session's worker (call.c carries them).
 *
 * A call is built in the client's preallocated protobuf-c structures,
 * packed into a reused frame buffer and its result unpacked into the
 * client's arena, so the invoke path does not touch malloc.  Heap arrays
 * are staged through a region kept across calls.
 */
#include <stddef.h>
#include <string.h>

#include "client/client_internal.h"
#include "common/util.h"
#include "shm/call_page.h"
#include "shm/desc.h"

/* Options of one call, read from a caller's mxop_call_t of any size. */
typedef struct callopts {
    const char *const *attrs;
    uint64_t state;
    int32_t timeout_ms;
    uint64_t seed;
    const int64_t *const *in_strides;
    const int64_t *const *out_strides;
} callopts_t;

/* How one array travels (see run_invoke). */
enum array_path {
    PATH_DIRECT = 0,  /* its region and offset, contiguous */
    PATH_HEAP = 1,    /* a contiguous heap array, memcpy'd through staging */
    PATH_STRIDED = 2, /* its region, offset and strides: the op is MXOP_OP_STRIDED */
    PATH_GATHER = 3,  /* non-contiguous, gathered into staging (and scattered back) */
    PATH_SCRATCH = 4, /* scratch mode: a region array the op writes, copied through staging */
};

#define CALL_HAS(o, field) ((o)->struct_size >= offsetof(mxop_call_t, field) + sizeof((o)->field))

static uint64_t round_up(uint64_t v, uint64_t to)
{
    return (v + to - 1) / to * to;
}

void mxop__callbufs_init(mxop_client_t *c)
{
    mxop__callbufs_t *b = &c->cb;
    mxop__call__init(&b->call);
    mxop__invoke__init(&b->invoke);
    mxop__infer__init(&b->infer);
    mxop__state_create__init(&b->state_create);
    mxop__state_destroy__init(&b->state_destroy);
    for (int i = 0; i < MXOP_MAX_TENSORS; i++) {
        mxop__tensor_desc__init(&b->in_desc[i]);
        mxop__tensor_desc__init(&b->out_desc[i]);
        b->in_ptr[i] = &b->in_desc[i];
        b->out_ptr[i] = &b->out_desc[i];
        mxop__shape__init(&b->shapes[i]);
        b->shape_ptr[i] = &b->shapes[i];
    }
    for (int i = 0; i < MXOP__MAX_ATTRS; i++) {
        mxop__attr__init(&b->attrs[i]);
        b->attr_ptr[i] = &b->attrs[i];
    }
}

static int get_opts(mxop_client_t *c, const mxop_call_t *call, callopts_t *o)
{
    memset(o, 0, sizeof *o);
    o->timeout_ms = c->timeout_ms;
    if (call == NULL)
        return 0;
    if (call->struct_size < sizeof call->struct_size)
        return mxop__fail(c, MXOP_EINVAL, "call->struct_size is %u; set it to sizeof(mxop_call_t)",
                          call->struct_size);
    if (CALL_HAS(call, attrs))
        o->attrs = call->attrs;
    if (CALL_HAS(call, state))
        o->state = call->state;
    if (CALL_HAS(call, timeout_ms) && call->timeout_ms != 0) {
        if (call->timeout_ms < 0)
            return mxop__fail(c, MXOP_EINVAL, "call->timeout_ms is negative (%d)",
                              (int)call->timeout_ms);
        o->timeout_ms = call->timeout_ms;
    }
    if (CALL_HAS(call, seed))
        o->seed = call->seed;
    if (CALL_HAS(call, in_strides))
        o->in_strides = call->in_strides;
    if (CALL_HAS(call, out_strides))
        o->out_strides = call->out_strides;
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Strides */

/* The strides given for array i, or NULL when none or contiguous anyway. */
static const int64_t *strides_of(const int64_t *const *all, int i, const mxop_array_t *a)
{
    if (all == NULL || all[i] == NULL)
        return NULL;
    const int64_t *st = all[i];
    int64_t want = 1;
    for (int d = a->ndim - 1; d >= 0; d--) {
        if (a->shape[d] == 0)
            return NULL; /* no element to address */
        if (a->shape[d] > 1 && st[d] != want)
            return st;
        want *= a->shape[d];
    }
    return NULL;
}

/* Element offsets of the nearest and furthest elements from data (non-empty array). */
static int strided_extent(const mxop_array_t *a, const int64_t *st, int64_t *lo, int64_t *hi)
{
    *lo = *hi = 0;
    for (int d = 0; d < a->ndim; d++) {
        int64_t reach;
        if (__builtin_mul_overflow(a->shape[d] - 1, st[d], &reach))
            return -1;
        if (reach < 0 ? __builtin_add_overflow(*lo, reach, lo)
                      : __builtin_add_overflow(*hi, reach, hi))
            return -1;
    }
    return 0;
}

/*
 * Copies between the strided array `a` and contiguous `flat`: gather
 * (to_flat) or scatter.  Row by row when the last axis is dense.
 */
static void strided_copy(const mxop_array_t *a, const int64_t *st, void *flat, int to_flat)
{
    size_t esize = mxop_dtype_size(a->dtype);
    int nd = a->ndim;
    int64_t idx[MXOP_MAX_DIMS] = {0};
    size_t rows = 1;
    for (int d = 0; d < nd; d++) {
        if (a->shape[d] == 0)
            return;
        rows *= (size_t)a->shape[d];
    }
    int64_t inner = nd > 0 ? a->shape[nd - 1] : 1;
    int dense = nd > 0 && st[nd - 1] == 1;
    if (nd > 0)
        rows /= (size_t)inner;
    char *f = flat;
    for (size_t r = 0; r < rows; r++) {
        int64_t off = 0;
        for (int d = 0; d < nd - 1; d++)
            off += idx[d] * st[d];
        char *p = (char *)a->data + off * (int64_t)esize;
        if (dense) {
            if (to_flat)
                memcpy(f, p, (size_t)inner * esize);
            else
                memcpy(p, f, (size_t)inner * esize);
            f += (size_t)inner * esize;
        } else {
            int64_t step = nd > 0 ? st[nd - 1] * (int64_t)esize : 0;
            for (int64_t j = 0; j < inner; j++, f += esize) {
                if (to_flat)
                    memcpy(f, p + j * step, esize);
                else
                    memcpy(p + j * step, f, esize);
            }
        }
        for (int d = nd - 2; d >= 0; d--) {
            if (++idx[d] < a->shape[d])
                break;
            idx[d] = 0;
        }
    }
}

/* Points the preallocated Attr structs at a {"k", "v", ..., NULL} list. */
static int set_attrs(mxop_client_t *c, const char *const *attrs, size_t *n_out)
{
    size_t n = 0;
    *n_out = 0;
    if (attrs == NULL)
        return 0;
    for (size_t i = 0; attrs[i] != NULL; i += 2) {
        if (attrs[i + 1] == NULL)
            return mxop__fail(c, MXOP_EINVAL, "attrs: key '%s' has no value", attrs[i]);
        if (n == MXOP__MAX_ATTRS)
            return mxop__fail(c, MXOP_EINVAL, "attrs: more than %d attributes", MXOP__MAX_ATTRS);
        c->cb.attrs[n].key = (char *)attrs[i];
        c->cb.attrs[n].value = (char *)attrs[i + 1];
        n++;
    }
    *n_out = n;
    return 0;
}

static int check_op(mxop_client_t *c, const mxop_op_t *op)
{
    if (op == NULL)
        return mxop__fail(c, MXOP_EINVAL, "op is NULL");
    if (op->client != c)
        return mxop__fail(c, MXOP_EINVAL, "op belongs to another client");
    if (!op->present)
        return mxop__fail(c, MXOP_EUNKNOWN_OP,
                          "op '%s' (%s) is no longer loaded in this session (its library was "
                          "reloaded without it, or not loaded again after a reconnection)",
                          op->name != NULL ? op->name : "?",
                          op->library != NULL ? op->library : "?");
    return 0;
}

/*
 * Checks one array here, before anything is sent, and gives its span.
 * The worker checks again; this catches the engine's own mistakes with a
 * message naming the argument.
 */
static int check_array(mxop_client_t *c, const char *what, int i, const mxop_array_t *a, int is_out,
                       const int64_t *st, uint64_t *span)
{
    char why[256];
    uint64_t elems;

    if (mxop_dtype_size(a->dtype) == 0)
        return mxop__fail(c, MXOP_EINVAL, "%s[%d]: unknown dtype %d", what, i, (int)a->dtype);
    if (a->ndim < 0 || a->ndim > MXOP_MAX_DIMS)
        return mxop__fail(c, MXOP_EINVAL, "%s[%d]: ndim %d is outside [0, %d]", what, i,
                          (int)a->ndim, MXOP_MAX_DIMS);
    if (is_out && (a->req < MXOP_REQ_WRITE || a->req > MXOP_REQ_NULL))
        return mxop__fail(c, MXOP_EINVAL, "%s[%d]: req %d is not write, add or null", what, i,
                          (int)a->req);
    why[0] = '\0';
    if (mxop__desc_span(a->dtype, a->ndim, a->shape, NULL, span, &elems, why, sizeof why) < 0)
        return mxop__fail(c, MXOP_EINVAL, "%s[%d]: %s", what, i, why);
    if (a->region == MXOP_REGION_HEAP) {
        if (a->data == NULL && *span > 0)
            return mxop__fail(c, MXOP_EINVAL, "%s[%d]: heap array (region 0) with data NULL", what,
                              i);
        return 0;
    }
    const mxop__region_t *r = mxop__region_find(c, a->region);
    if (r == NULL)
        return mxop__fail(c, MXOP_EUNKNOWN_REGION, "%s[%d]: no region %u in this session", what, i,
                          a->region);
    if (st != NULL) {
        /* Every element the strides reach must lie in the region. */
        int64_t lo, hi;
        int64_t esz = (int64_t)mxop_dtype_size(a->dtype);
        if (a->offset > r->size || strided_extent(a, st, &lo, &hi) < 0 ||
            lo < -(int64_t)(a->offset / (uint64_t)esz) ||
            (uint64_t)hi >= (r->size - a->offset) / (uint64_t)esz)
            return mxop__fail(c, MXOP_EBOUNDS,
                              "%s[%d]: its strides reach outside region %u of %zu bytes", what, i,
                              a->region, r->size);
        return 0;
    }
    why[0] = '\0';
    if (mxop__desc_check_bounds(a->offset, *span, mxop_dtype_size(a->dtype), r->size, why,
                                sizeof why) < 0)
        return mxop__fail(c, MXOP_EBOUNDS, "%s[%d]: %s", what, i, why);
    return 0;
}

/* An array the call would write, in a region the engine marked read-only: refused by name. */
static int check_writable(mxop_client_t *c, const char *what, int i, const mxop_array_t *a)
{
    const mxop__region_t *r = mxop__region_find(c, a->region);
    if (r == NULL || !r->read_only)
        return 0;
    return mxop__fail(c, MXOP_EREAD_ONLY,
                      "%s[%d]: region %u is marked read-only (mxop_region_set_read_only), and the "
                      "call would write it",
                      what, i, a->region);
}

/* Makes the staging region at least `need` bytes (kept across calls). */
static int stage_ensure(mxop_client_t *c, uint64_t need)
{
    if (c->stage_region != 0 && c->stage_size >= need)
        return 0;
    uint64_t size = need > 2 * (uint64_t)c->stage_size ? need : 2 * (uint64_t)c->stage_size;
    size = round_up(size ? size : 1, MXOP__ARENA_CHUNK_ROUND);
    if (size > SIZE_MAX)
        return mxop__fail(c, MXOP_ESHM, "heap arrays of %llu bytes cannot be staged",
                          (unsigned long long)need);
    mxop__region_t *e;
    int rc = mxop__region_new(c, (size_t)size, MXOP__REGION_STAGE, &e);
    if (rc < 0)
        return rc;
    uint32_t old = c->stage_region;
    c->stage_region = e->id;
    c->stage_base = e->base;
    c->stage_size = e->size;
    /* The old area is not needed any more; if it cannot be released now,
     * it is freed with the session. */
    if (old != 0)
        (void)mxop__region_drop(c, old);
    return 0;
}

/* Which way array `a` (with strides `st`, NULL: contiguous) travels. */
static int choose_path(const mxop_array_t *a, const int64_t *st, int strided_op)
{
    if (st == NULL)
        return a->region == MXOP_REGION_HEAP ? PATH_HEAP : PATH_DIRECT;
    if (a->region == MXOP_REGION_HEAP || !strided_op)
        return PATH_GATHER;
    /* The wire (and the worker) take non-negative strides only. */
    for (int d = 0; d < a->ndim; d++)
        if (st[d] < 0)
            return PATH_GATHER;
    return PATH_STRIDED;
}

/*
 * Copies between the caller's array (its elements at `ptr`: the heap
 * pointer, or the client's own mapping of its region) and its staging
 * slot: in before the call (to_slot), back after it.  `span` bytes of a
 * contiguous array; a strided one element by element.
 */
static void stage_copy(mxop_client_t *c, const mxop_array_t *a, void *ptr, int path,
                       const int64_t *st, uint64_t stage_at, uint64_t span, int to_slot,
                       int scratch)
{
    void *slot = c->stage_base + stage_at;
    if (path == PATH_HEAP || path == PATH_SCRATCH) {
        if (span > 0)
            memcpy(to_slot ? slot : ptr, to_slot ? ptr : slot, span);
    } else if (path == PATH_GATHER) {
        mxop_array_t at = *a;
        at.data = ptr;
        strided_copy(&at, st, slot, to_slot);
    } else {
        return;
    }
    if (scratch)
        c->scratch_bytes += span;
    else
        c->stats.staged_bytes += span;
}

/*
 * Scratch mode (docs/security.md, "The engine's memory"): the worker holds
 * the session's regions read-only, so an array in a region that the op
 * writes (an output, a declared-mutated input) goes through the staging
 * region, the session's scratch region, and is copied into place after a
 * successful call.  Device regions keep their path (GPU memory has no
 * read-only view).  Gives the array's new path and, in *ptr, where the
 * client reads and writes its elements.
 */
static int scratch_path(mxop_client_t *c, const char *what, int i, const mxop_array_t *a, int path,
                        void **ptr)
{
    *ptr = a->data;
    if (a->region == MXOP_REGION_HEAP)
        return path;
    const mxop__region_t *r = mxop__region_find(c, a->region);
    if (r == NULL || r->cuda)
        return path;
    if (r->cmap == NULL)
        return mxop__fail(c, MXOP_EREAD_ONLY,
                          "%s[%d]: region %u has no writable mapping in this process, and the "
                          "session runs an untrusted library (scratch mode): its outputs are "
                          "copied into place by the client",
                          what, i, a->region);
    *ptr = r->cmap + a->offset;
    return path == PATH_DIRECT ? PATH_SCRATCH : PATH_GATHER;
}

static void fill_desc(mxop_client_t *c, Mxop__TensorDesc *d, const mxop_array_t *a, uint32_t region,
                      uint64_t offset, int32_t req, const int64_t *strides)
{
    /* The daemon's id for the region: the engine's, unless the client reconnected. */
    d->region = mxop__region_wire(c, region);
    d->offset = offset;
    d->dtype = a->dtype;
    d->n_shape = (size_t)a->ndim;
    d->shape = (int64_t *)a->shape;
    d->n_strides = strides != NULL ? (size_t)a->ndim : 0;
    d->strides = (int64_t *)strides;
    d->req = req;
}

/* The real shapes of an op's dynamic outputs, from the worker's result. */
static int set_dynamic_shapes(mxop_client_t *c, const mxop_op_t *op, const Mxop__CallResult *r,
                              mxop_array_t *out, int n_out)
{
    if (r->n_out_shapes != (size_t)n_out)
        return mxop__fail(c, MXOP_EPROTOCOL, "op '%s' (%s): %zu output shapes for %d outputs",
                          op->name, op->library, r->n_out_shapes, n_out);
    for (int i = 0; i < n_out && i < 64; i++) {
        if (!((op->decls.dynamic_outputs >> i) & 1u))
            continue;
        const Mxop__Shape *s = r->out_shapes[i];
        uint64_t elems = 1;
        int bad = s == NULL || s->n_dims > MXOP_MAX_DIMS;
        for (size_t d = 0; !bad && d < s->n_dims; d++)
            bad = s->dims[d] < 0 || __builtin_mul_overflow(elems, (uint64_t)s->dims[d], &elems);
        uint64_t bytes = elems * mxop_dtype_size(out[i].dtype);
        if (bad || elems > UINT64_MAX / 8 || bytes > c->cb.out_span[i])
            return mxop__fail(c, MXOP_EPROTOCOL, "op '%s' (%s): bad shape of dynamic output %d",
                              op->name, op->library, i);
        out[i].ndim = (int32_t)s->n_dims;
        memset(out[i].shape, 0, sizeof(out[i].shape));
        for (size_t d = 0; d < s->n_dims; d++)
            out[i].shape[d] = s->dims[d];
        out[i].nbytes = (size_t)bytes;
    }
    return 0;
}

/*
 * The bytes of heap array `a` (with strides `st`, NULL: contiguous), as
 * [*start, *start + *len) and the distance from *start to a->data; 0, or
 * -1 when it has no bytes or a bad shape (check_array names it).
 */
static int heap_extent(const mxop_array_t *a, const int64_t *st, const uint8_t **start,
                       uint64_t *len, uint64_t *lead)
{
    char why[64];
    uint64_t span, elems;
    if (a->region != MXOP_REGION_HEAP || a->data == NULL ||
        mxop__desc_span(a->dtype, a->ndim, a->shape, NULL, &span, &elems, why, sizeof why) < 0 ||
        span == 0)
        return -1;
    *start = a->data;
    *len = span;
    *lead = 0;
    if (st == NULL)
        return 0;
    int64_t lo, hi, esz = (int64_t)mxop_dtype_size(a->dtype), first, past;
    if (strided_extent(a, st, &lo, &hi) < 0 || __builtin_mul_overflow(lo, esz, &first) ||
        __builtin_mul_overflow(hi + 1, esz, &past) || (uint64_t)-first > (uintptr_t)a->data)
        return -1;
    *lead = (uint64_t)-first;
    *start = (const uint8_t *)a->data - *lead;
    *len = (uint64_t)(past - first);
    return 0;
}

/*
 * Heap arrays whose bytes lie wholly in memory the client maps itself go
 * by reference: in a region of its table (an arena chunk, a user region
 * mapped here), or in a shared-heap block, which is registered with the
 * session (once).  Each is described as (its region, offset); the binding
 * never names a region.  *copy gets the arrays, with those changed, when
 * any is (the caller's stay as they are); else it stays `a`.  Bit i of
 * `writes`: the call writes array i.  No allocation but a block's first
 * registration.
 */
static int by_reference(mxop_client_t *c, const mxop_array_t *a, int n,
                        const int64_t *const *strides, uint64_t writes, mxop_array_t *buf,
                        const mxop_array_t **copy)
{
    for (int i = 0; i < n; i++) {
        const uint8_t *start;
        uint64_t len, lead, off;
        uint32_t region;
        int shared = 0;
        if (heap_extent(&a[i], strides_of(strides, i, &a[i]), &start, &len, &lead) < 0)
            continue;
        int found = mxop__lookup_find(c, start, len, &region, &off, &shared);
        /* A block of the shared heap: shared_heap.c says whether this call may use it. */
        if (!found || shared) {
            if (!mxop__shared_any())
                continue;
            int write = i < 64 && ((writes >> i) & 1u);
            found = mxop__shared_resolve(c, start, len, write, &region, &off);
            if (found < 0)
                return found;
        }
        if (!found)
            continue;
        if (*copy == a) {
            memcpy(buf, a, (size_t)n * sizeof *a);
            *copy = buf;
        }
        buf[i].region = region;
        buf[i].offset = off + lead;
    }
    return 0;
}

static int run_invoke(mxop_client_t *c, const mxop_op_t *op, int backward, const mxop_call_t *call,
                      const mxop_array_t *in, int n_in, mxop_array_t *out, int n_out)
{
    mxop__callbufs_t *b = &c->cb;
    callopts_t o;
    size_t nattrs;
    int rc;

    /* A daemon that went away: reconnected before the op is checked (its index may move). */
    rc = mxop__reconnect_if_gone(c);
    if (rc < 0)
        return rc;
    rc = check_op(c, op);
    if (rc < 0)
        return rc;
    if (backward && !op->has_backward)
        return mxop__fail(c, MXOP_ENOT_SUPPORTED, "op '%s' (%s) has no backward", op->name,
                          op->library);
    if (n_in < 0 || n_in > MXOP_MAX_TENSORS)
        return mxop__fail(c, MXOP_EINVAL, "n_in %d is outside [0, %d]", n_in, MXOP_MAX_TENSORS);
    if (n_out < 0 || n_out > MXOP_MAX_TENSORS)
        return mxop__fail(c, MXOP_EINVAL, "n_out %d is outside [0, %d]", n_out, MXOP_MAX_TENSORS);
    if (n_in > 0 && in == NULL)
        return mxop__fail(c, MXOP_EINVAL, "in is NULL with n_in %d", n_in);
    if (n_out > 0 && out == NULL)
        return mxop__fail(c, MXOP_EINVAL, "out is NULL with n_out %d", n_out);
    rc = get_opts(c, call, &o);
    if (rc < 0)
        return rc;
    rc = mxop__reconnect_check_state(c, o.state);
    if (rc < 0)
        return rc;
    rc = set_attrs(c, o.attrs, &nattrs);
    if (rc < 0)
        return rc;

    /* Shared-heap blocks freed while registered are released here, between calls. */
    mxop__shared_revoke(c);
    mxop_array_t *out_user = out;
    const mxop_array_t *out_c = out;
    uint64_t out_writes = 0;
    for (int i = 0; i < n_out && i < 64; i++)
        if (out[i].req != MXOP_REQ_NULL)
            out_writes |= (uint64_t)1 << i;
    rc = by_reference(c, in, n_in, o.in_strides, backward ? 0 : op->mutated_inputs, b->in_ref, &in);
    if (rc == 0)
        rc = by_reference(c, out, n_out, o.out_strides, out_writes, b->out_ref, &out_c);
    if (rc < 0)
        return rc;
    out = (mxop_array_t *)out_c; /* b->out_ref, or the caller's own */

    /*
     * Check every array and choose its path: heap arrays and non-contiguous
     * arrays the op cannot take as they are go through the staging area.
     */
    int strided_op = (op->decls.flags & MXOP_OP_STRIDED) != 0;
    const int64_t *in_st[MXOP_MAX_TENSORS], *out_st[MXOP_MAX_TENSORS];
    unsigned char in_path[MXOP_MAX_TENSORS], out_path[MXOP_MAX_TENSORS];
    void *in_at[MXOP_MAX_TENSORS], *out_at[MXOP_MAX_TENSORS];
    unsigned char in_scr[MXOP_MAX_TENSORS], out_scr[MXOP_MAX_TENSORS]; /* staged for scratch mode */
    uint64_t stage = 0;
    int heap = 0;
    for (int i = 0; i < n_in; i++) {
        in_st[i] = strides_of(o.in_strides, i, &in[i]);
        rc = check_array(c, "in", i, &in[i], 0, in_st[i], &b->in_span[i]);
        if (rc < 0)
            return rc;
        in_path[i] = choose_path(&in[i], in_st[i], strided_op);
        if (!backward && i < 64 && ((op->mutated_inputs >> i) & 1) &&
            (rc = check_writable(c, "in", i, &in[i])) < 0)
            return rc;
        in_at[i] = in[i].data;
        in_scr[i] = 0;
        if (c->confined && !backward && i < 64 && ((op->mutated_inputs >> i) & 1)) {
            rc = scratch_path(c, "in", i, &in[i], in_path[i], &in_at[i]);
            if (rc < 0)
                return rc;
            in_scr[i] = rc != in_path[i];
            in_path[i] = (unsigned char)rc;
        }
        if (in_path[i] == PATH_HEAP || in_path[i] == PATH_GATHER || in_path[i] == PATH_SCRATCH) {
            heap = 1;
            b->in_stage[i] = round_up(stage, MXOP__ARENA_ALIGN);
            stage = b->in_stage[i] + b->in_span[i];
        }
    }
    for (int i = 0; i < n_out; i++) {
        out_st[i] = strides_of(o.out_strides, i, &out[i]);
        if (out_st[i] != NULL && !backward && i < 64 && ((op->decls.dynamic_outputs >> i) & 1u))
            return mxop__fail(c, MXOP_EINVAL,
                              "out[%d]: op '%s' gives it its shape during forward; it must be "
                              "contiguous",
                              i, op->name);
        rc = check_array(c, "out", i, &out[i], 1, out_st[i], &b->out_span[i]);
        if (rc < 0)
            return rc;
        out_path[i] = choose_path(&out[i], out_st[i], strided_op);
        if (out[i].req != MXOP_REQ_NULL && (rc = check_writable(c, "out", i, &out[i])) < 0)
            return rc;
        out_at[i] = out[i].data;
        out_scr[i] = 0;
        if (c->confined) {
            rc = scratch_path(c, "out", i, &out[i], out_path[i], &out_at[i]);
            if (rc < 0)
                return rc;
            out_scr[i] = rc != out_path[i];
            out_path[i] = (unsigned char)rc;
        }
        if (out_path[i] == PATH_HEAP || out_path[i] == PATH_GATHER || out_path[i] == PATH_SCRATCH) {
            heap = 1;
            b->out_stage[i] = round_up(stage, MXOP__ARENA_ALIGN);
            stage = b->out_stage[i] + b->out_span[i];
        }
    }

    rc = mxop__call_ready(c);
    if (rc < 0)
        return rc;
    if (heap) {
        rc = stage_ensure(c, stage);
        if (rc < 0)
            return rc;
    }

    for (int i = 0; i < n_in; i++) {
        switch (in_path[i]) {
        case PATH_HEAP:
        case PATH_GATHER:
        case PATH_SCRATCH:
            stage_copy(c, &in[i], in_at[i], in_path[i], in_st[i], b->in_stage[i], b->in_span[i], 1,
                       in_scr[i]);
            fill_desc(c, &b->in_desc[i], &in[i], c->stage_region, b->in_stage[i], 0, NULL);
            break;
        default: fill_desc(c, &b->in_desc[i], &in[i], in[i].region, in[i].offset, 0, in_st[i]);
        }
    }
    for (int i = 0; i < n_out; i++) {
        if (out_path[i] == PATH_HEAP || out_path[i] == PATH_GATHER || out_path[i] == PATH_SCRATCH) {
            /*
             * An output that accumulates needs what is there now.  So does any output in
             * scratch mode: an element the op leaves unwritten must keep its value, as on
             * the zero-copy path, not take whatever an earlier call left in scratch.
             */
            if (out[i].req == MXOP_REQ_ADD || (out_scr[i] && out[i].req != MXOP_REQ_NULL))
                stage_copy(c, &out[i], out_at[i], out_path[i], out_st[i], b->out_stage[i],
                           b->out_span[i], 1, out_scr[i]);
            fill_desc(c, &b->out_desc[i], &out[i], c->stage_region, b->out_stage[i], out[i].req,
                      NULL);
        } else {
            fill_desc(c, &b->out_desc[i], &out[i], out[i].region, out[i].offset, out[i].req,
                      out_st[i]);
        }
    }

    Mxop__Invoke *inv = &b->invoke;
    inv->op = op->index;
    inv->backward = backward ? 1 : 0;
    inv->n_attrs = nattrs;
    inv->attrs = nattrs ? b->attr_ptr : NULL;
    inv->state = o.state;
    inv->n_inputs = (size_t)n_in;
    inv->inputs = n_in ? b->in_ptr : NULL;
    inv->n_outputs = (size_t)n_out;
    inv->outputs = n_out ? b->out_ptr : NULL;
    inv->deadline_ms = (uint32_t)o.timeout_ms;
    inv->seed = o.seed;
    b->call.body_case = MXOP__CALL__BODY_INVOKE;
    b->call.invoke = inv;

    Mxop__CallResult *r;
    rc = mxop__call_transact(c, op, o.timeout_ms, &r);
    if (rc < 0)
        return rc;

    /* A dynamic output's real size is known first, so that only its bytes are copied. */
    int dynamic = !backward && op->decls.dynamic_outputs != 0;
    if (dynamic) {
        rc = set_dynamic_shapes(c, op, r, out, n_out);
        if (rc < 0)
            return rc;
        for (int i = 0; out != out_user && i < n_out; i++) {
            out_user[i].ndim = out[i].ndim;
            memcpy(out_user[i].shape, out[i].shape, sizeof out[i].shape);
            out_user[i].nbytes = out[i].nbytes;
        }
    }
    if (heap) {
        for (int i = 0; i < n_out; i++) {
            if (out[i].req == MXOP_REQ_NULL)
                continue;
            uint64_t n = dynamic && i < 64 && ((op->decls.dynamic_outputs >> i) & 1u)
                             ? out[i].nbytes
                             : b->out_span[i];
            stage_copy(c, &out[i], out_at[i], out_path[i], out_st[i], b->out_stage[i], n, 0,
                       out_scr[i]);
        }
        /* Inputs the op declares it mutates come back too (forward only:
         * the mask is about the forward inputs). */
        for (int i = 0; !backward && i < n_in && i < 64; i++)
            if ((op->mutated_inputs >> i) & 1)
                stage_copy(c, &in[i], in_at[i], in_path[i], in_st[i], b->in_stage[i], b->in_span[i],
                           0, in_scr[i]);
    }
    return 0;
}

/* Whether two arrays' memory may overlap. */
static int overlap(const mxop_array_t *a, const mxop_array_t *b)
{
    if (a->region != b->region)
        return 0;
    uint64_t a0 = a->region == MXOP_REGION_HEAP ? (uint64_t)(uintptr_t)a->data : a->offset;
    uint64_t b0 = b->region == MXOP_REGION_HEAP ? (uint64_t)(uintptr_t)b->data : b->offset;
    return a0 < b0 + b->nbytes && b0 < a0 + a->nbytes;
}

/*
 * Whether a call cut short by its daemon going away may simply run again:
 * it mutates no input, accumulates into no output and writes no output over
 * an input, so a half-run left nothing it reads.  A call with a state may
 * too: its state was lost with the daemon, so the run again stops at
 * mxop__reconnect_check_state with MXOP_ESTATE_LOST.
 */
static int rerun_safe(const mxop_op_t *op, int backward, const mxop_call_t *call,
                      const mxop_array_t *in, int n_in, const mxop_array_t *out, int n_out)
{
    if (op == NULL || n_in < 0 || n_out < 0 || n_in > MXOP_MAX_TENSORS ||
        n_out > MXOP_MAX_TENSORS || (n_in > 0 && in == NULL) || (n_out > 0 && out == NULL))
        return 0;
    /* A state's call runs again only as far as the check that names the state lost. */
    if (call != NULL && CALL_HAS(call, state) && call->state != 0)
        return 1;
    if (!backward && op->mutated_inputs != 0)
        return 0;
    for (int i = 0; i < n_out; i++) {
        if (out[i].req == MXOP_REQ_ADD)
            return 0;
        for (int k = 0; k < n_in; k++)
            if (overlap(&out[i], &in[k]))
                return 0;
    }
    return 1;
}

int mxop__invoke_locked(mxop_client_t *c, const mxop_op_t *op, int backward,
                        const mxop_call_t *call, const mxop_array_t *in, int n_in,
                        mxop_array_t *out, int n_out)
{
    mxop__error_forget_sibling();
    /* Every forward or backward the engine makes counts, including those
     * refused here, so that errors never exceed calls. */
    c->stats.calls++;
    uint64_t staged0 = c->stats.staged_bytes;
    int64_t t0 = mxop__now_ns();
    int rc = run_invoke(c, op, backward, call, in, n_in, out, n_out);
    if (rc < 0) {
        int again;
        rc = mxop__reconnect_after(c, rc, op, rerun_safe(op, backward, call, in, n_in, out, n_out),
                                   &again);
        if (again)
            rc = run_invoke(c, op, backward, call, in, n_in, out, n_out);
    }
    if (rc < 0)
        c->stats.errors++;
    /* The per-op counters the daemon reports (shm/call_stats.h): a few relaxed stores. */
    if (c->call_page != NULL && op != NULL && op->client == c)
        mxop__stats_record(&c->call_page->stats, op->index, rc, (uint64_t)(mxop__now_ns() - t0),
                           c->stats.staged_bytes - staged0);
    return rc;
}

/* Fills the preallocated shapes from dtypes and shapes the caller gave. */
static int set_sigs(mxop_client_t *c, int n_in, const int32_t *in_dtypes,
                    const mxop_shape_t *in_shapes)
{
    if (n_in < 0 || n_in > MXOP_MAX_TENSORS)
        return mxop__fail(c, MXOP_EINVAL, "n_in %d is outside [0, %d]", n_in, MXOP_MAX_TENSORS);
    if (n_in > 0 && (in_dtypes == NULL || in_shapes == NULL))
        return mxop__fail(c, MXOP_EINVAL, "%s is NULL with n_in %d",
                          in_dtypes == NULL ? "in_dtypes" : "in_shapes", n_in);
    for (int i = 0; i < n_in; i++) {
        if (mxop_dtype_size(in_dtypes[i]) == 0)
            return mxop__fail(c, MXOP_EINVAL, "in_dtypes[%d]: unknown dtype %d", i,
                              (int)in_dtypes[i]);
        if (in_shapes[i].ndim < 0 || in_shapes[i].ndim > MXOP_MAX_DIMS)
            return mxop__fail(c, MXOP_EINVAL, "in_shapes[%d]: ndim %d is outside [0, %d]", i,
                              (int)in_shapes[i].ndim, MXOP_MAX_DIMS);
        for (int d = 0; d < in_shapes[i].ndim; d++)
            if (in_shapes[i].dims[d] < 0)
                return mxop__fail(c, MXOP_EINVAL, "in_shapes[%d]: dimension %d is negative", i, d);
        c->cb.dtypes[i] = in_dtypes[i];
        c->cb.shapes[i].n_dims = (size_t)in_shapes[i].ndim;
        c->cb.shapes[i].dims = (int64_t *)in_shapes[i].dims;
    }
    return 0;
}

/*
 * Infer and StateCreate carry the same signature (op, attributes, input
 * dtypes and shapes): both are staged in the client's call buffers here and
 * copied into their (distinct but same-shaped) messages by FILL_SIGNATURE.
 */
static int prepare_signature(mxop_client_t *c, const char *const *attrs, int n_in,
                             const int32_t *in_dtypes, const mxop_shape_t *in_shapes,
                             size_t *nattrs)
{
    int rc = set_sigs(c, n_in, in_dtypes, in_shapes);
    if (rc < 0)
        return rc;
    rc = set_attrs(c, attrs, nattrs);
    if (rc < 0)
        return rc;
    return mxop__call_ready(c);
}

#define FILL_SIGNATURE(m, c, op, nattrs, n_in)                                                     \
    do {                                                                                           \
        (m)->op = (op)->index;                                                                     \
        (m)->n_attrs = (nattrs);                                                                   \
        (m)->attrs = (nattrs) ? (c)->cb.attr_ptr : NULL;                                           \
        (m)->n_in_dtypes = (size_t)(n_in);                                                         \
        (m)->in_dtypes = (n_in) ? (c)->cb.dtypes : NULL;                                           \
        (m)->n_in_shapes = (size_t)(n_in);                                                         \
        (m)->in_shapes = (n_in) ? (c)->cb.shape_ptr : NULL;                                        \
    } while (0)

static int run_infer(mxop_client_t *c, const mxop_op_t *op, const char *const *attrs, int n_in,
                     const int32_t *in_dtypes, const mxop_shape_t *in_shapes, int n_out,
                     int32_t *out_dtypes, mxop_shape_t *out_shapes)
{
    size_t nattrs;
    int rc = mxop__reconnect_if_gone(c);
    if (rc < 0)
        return rc;
    rc = check_op(c, op);
    if (rc < 0)
        return rc;
    if (n_out != op->num_outputs)
        return mxop__fail(c, MXOP_EARITY, "op '%s' (%s) has %d output%s, n_out is %d", op->name,
                          op->library, (int)op->num_outputs, op->num_outputs == 1 ? "" : "s",
                          n_out);
    if (n_out > MXOP_MAX_TENSORS || n_out < 0)
        return mxop__fail(c, MXOP_EINVAL, "n_out %d is outside [0, %d]", n_out, MXOP_MAX_TENSORS);
    if (n_out > 0 && (out_dtypes == NULL || out_shapes == NULL))
        return mxop__fail(c, MXOP_EINVAL, "%s is NULL with n_out %d",
                          out_dtypes == NULL ? "out_dtypes" : "out_shapes", n_out);
    rc = prepare_signature(c, attrs, n_in, in_dtypes, in_shapes, &nattrs);
    if (rc < 0)
        return rc;

    Mxop__Infer *m = &c->cb.infer;
    FILL_SIGNATURE(m, c, op, nattrs, n_in);
    c->cb.call.body_case = MXOP__CALL__BODY_INFER;
    c->cb.call.infer = m;

    Mxop__CallResult *r;
    rc = mxop__call_transact(c, op, c->timeout_ms, &r);
    if (rc < 0)
        return rc;
    if (r->n_out_dtypes != (size_t)n_out || r->n_out_shapes != (size_t)n_out)
        return mxop__fail(c, MXOP_EPROTOCOL,
                          "op '%s' (%s): the worker inferred %zu dtypes and %zu shapes for %d "
                          "outputs",
                          op->name, op->library, r->n_out_dtypes, r->n_out_shapes, n_out);
    /* Nothing the worker inferred reaches the caller unless it is a dtype and a shape. */
    for (int i = 0; i < n_out; i++) {
        const Mxop__Shape *s = r->out_shapes[i];
        int bad = s == NULL || s->n_dims > MXOP_MAX_DIMS;
        for (size_t d = 0; !bad && d < s->n_dims; d++)
            bad = s->dims[d] < 0;
        if (bad)
            return mxop__fail(c, MXOP_EPROTOCOL, "op '%s' (%s): bad inferred shape of output %d",
                              op->name, op->library, i);
        if (mxop_dtype_size(r->out_dtypes[i]) == 0)
            return mxop__fail(c, MXOP_EPROTOCOL,
                              "op '%s' (%s): the worker inferred dtype %d, which is none, for "
                              "output %d",
                              op->name, op->library, (int)r->out_dtypes[i], i);
    }
    for (int i = 0; i < n_out; i++) {
        const Mxop__Shape *s = r->out_shapes[i];
        out_dtypes[i] = r->out_dtypes[i];
        memset(&out_shapes[i], 0, sizeof out_shapes[i]);
        out_shapes[i].ndim = (int32_t)s->n_dims;
        for (size_t d = 0; d < s->n_dims; d++)
            out_shapes[i].dims[d] = s->dims[d];
    }
    return 0;
}

int mxop_infer(mxop_client_t *c, const mxop_op_t *op, const char *const *attrs, int n_in,
               const int32_t *in_dtypes, const mxop_shape_t *in_shapes, int n_out,
               int32_t *out_dtypes, mxop_shape_t *out_shapes)
{
    if (c == NULL)
        return MXOP_EINVAL;
    pthread_mutex_lock(&c->lock);
    int rc = run_infer(c, op, attrs, n_in, in_dtypes, in_shapes, n_out, out_dtypes, out_shapes);
    int again;
    /* Inferring changes nothing: one cut short runs again on the new daemon. */
    rc = mxop__reconnect_after(c, rc, op, 1, &again);
    if (again)
        rc = run_infer(c, op, attrs, n_in, in_dtypes, in_shapes, n_out, out_dtypes, out_shapes);
    pthread_mutex_unlock(&c->lock);
    return rc;
}

static int run_state_create(mxop_client_t *c, const mxop_op_t *op, const char *const *attrs,
                            int n_in, const int32_t *in_dtypes, const mxop_shape_t *in_shapes,
                            uint64_t *state)
{
    size_t nattrs;
    int rc = mxop__reconnect_if_gone(c);
    if (rc < 0)
        return rc;
    rc = check_op(c, op);
    if (rc < 0)
        return rc;
    if (state == NULL)
        return mxop__fail(c, MXOP_EINVAL, "state is NULL");
    *state = 0;
    if (!op->stateful)
        return mxop__fail(c, MXOP_ENOT_SUPPORTED, "op '%s' (%s) is not stateful", op->name,
                          op->library);
    rc = prepare_signature(c, attrs, n_in, in_dtypes, in_shapes, &nattrs);
    if (rc < 0)
        return rc;

    Mxop__StateCreate *m = &c->cb.state_create;
    FILL_SIGNATURE(m, c, op, nattrs, n_in);
    c->cb.call.body_case = MXOP__CALL__BODY_STATE_CREATE;
    c->cb.call.state_create = m;

    Mxop__CallResult *r;
    rc = mxop__call_transact(c, op, c->timeout_ms, &r);
    if (rc < 0)
        return rc;
    if (r->state == 0)
        return mxop__fail(c, MXOP_EPROTOCOL, "op '%s' (%s): the worker created state 0", op->name,
                          op->library);
    *state = r->state;
    mxop__reconnect_note_state(c, r->state, op);
    return 0;
}

int mxop_state_create(mxop_client_t *c, const mxop_op_t *op, const char *const *attrs, int n_in,
                      const int32_t *in_dtypes, const mxop_shape_t *in_shapes, uint64_t *state)
{
    if (c == NULL)
        return MXOP_EINVAL;
    pthread_mutex_lock(&c->lock);
    int rc = run_state_create(c, op, attrs, n_in, in_dtypes, in_shapes, state);
    int again;
    /* A state made on a daemon that went away went with it: made again on the new one. */
    rc = mxop__reconnect_after(c, rc, op, 1, &again);
    if (again)
        rc = run_state_create(c, op, attrs, n_in, in_dtypes, in_shapes, state);
    pthread_mutex_unlock(&c->lock);
    return rc;
}

int mxop_state_destroy(mxop_client_t *c, uint64_t state)
{
    if (c == NULL)
        return MXOP_EINVAL;
    pthread_mutex_lock(&c->lock);
    /* A state lost with a daemon that went away is gone already. */
    if (mxop__reconnect_state_destroyed(c, state)) {
        pthread_mutex_unlock(&c->lock);
        return 0;
    }
    int rc = mxop__reconnect_if_gone(c);
    if (rc == 0)
        rc = mxop__call_ready(c);
    if (rc == 0) {
        c->cb.state_destroy.state = state;
        c->cb.call.body_case = MXOP__CALL__BODY_STATE_DESTROY;
        c->cb.call.state_destroy = &c->cb.state_destroy;
        Mxop__CallResult *r;
        rc = mxop__call_transact(c, NULL, c->timeout_ms, &r);
    }
    pthread_mutex_unlock(&c->lock);
    return rc;
}
