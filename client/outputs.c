/*
 * client/outputs.c - where mxop_array_alloc puts arrays: the client's
 * arena (arena.c), or, while mxop_shared_outputs is on, the shared heap,
 * so that an engine's op outputs become its framework's tensors in warm
 * blocks (registered with the session and faulted in already) that its
 * allocator frees like any other.  The one switch for every binding.
 */
#include <stdatomic.h>
#include <string.h>

#include "client/client_internal.h"
#include "shm/desc.h"

static atomic_int shared_on;

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
    return 0;
}
