/*
 * client/outputs.c - where mxop_array_alloc puts arrays: the client's
 * arena (arena.c), or, while mxop_shared_outputs is on, the shared heap,
 * so that an engine's op outputs become its framework's tensors in warm
 * blocks (registered with the session and faulted in already) that its
 * allocator frees like any other.  The one switch for every binding, and
 * the count of what it gave (mxop_shared_stats_v2).
 */
#include <stdatomic.h>
#include <stddef.h>
#include <string.h>

#include "client/client_internal.h"
#include "shm/desc.h"

static atomic_int shared_on;
static atomic_ullong made; /* arrays given from the heap, ever (mxop_shared_stats_v2) */

int mxop_shared_outputs(int on)
{
    return atomic_exchange(&shared_on, on != 0);
}

int mxop__outputs_alloc(mxop_client_t *c, int32_t dtype, int32_t ndim, const int64_t *shape,
                        mxop_array_t *out)
{
    char why[64];
    uint64_t span, elems;
    if (!atomic_load_explicit(&shared_on, memory_order_relaxed))
        return -1;
    /* A bad argument is left to the arena, which names it. */
    if (out == NULL || mxop_dtype_size(dtype) == 0 || ndim < 0 || ndim > MXOP_MAX_DIMS ||
        (ndim > 0 && shape == NULL) ||
        mxop__desc_span(dtype, ndim, shape, NULL, &span, &elems, why, sizeof why) < 0 ||
        span > SIZE_MAX || span < mxop_shared_min_bytes())
        return -1;
    void *p = mxop_shared_alloc_output(c, (size_t)span);
    if (p == NULL)
        return -1; /* no block to be had: the arena's */
    memset(out, 0, sizeof *out);
    out->data = p;
    out->dtype = dtype;
    out->ndim = ndim;
    for (int32_t d = 0; d < ndim; d++)
        out->shape[d] = shape[d];
    out->region = MXOP_REGION_HEAP;
    out->nbytes = (size_t)span;
    out->req = MXOP_REQ_WRITE;
    atomic_fetch_add_explicit(&made, 1, memory_order_relaxed);
    return 0;
}

#define HAS(st, field)                                                                             \
    ((st)->struct_size >= offsetof(mxop_shared_stats_v2_t, field) + sizeof(st)->field)

int mxop_shared_stats_v2(mxop_shared_stats_v2_t *st)
{
    if (st == NULL || !HAS(st, blocks_live))
        return MXOP_EINVAL;
    mxop_shared_stats_t v1;
    mxop_shared_stats(&v1);
    /* The first members, each only as far as the caller's struct reaches. */
    const uint64_t from[] = {v1.blocks_live,   v1.bytes_live,  v1.blocks_cached, v1.bytes_cached,
                             v1.registrations, v1.revocations, v1.reused_warm};
    uint64_t *to[] = {&st->blocks_live,   &st->bytes_live,  &st->blocks_cached, &st->bytes_cached,
                      &st->registrations, &st->revocations, &st->reused_warm};
    for (size_t i = 0; i < sizeof from / sizeof from[0]; i++)
        if (st->struct_size >= (size_t)((char *)to[i] - (char *)st) + sizeof *to[i])
            *to[i] = from[i];
    if (HAS(st, outputs))
        st->outputs = atomic_load_explicit(&made, memory_order_relaxed);
    return 0;
}
