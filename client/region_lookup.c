/*
 * client/region_lookup.c - the questions asked of the spans
 * (region_spans.c) from above the region table: which region holds a
 * range (mxop_region_lookup, for bindings' "is this shared memory?"), and
 * which region a pool sibling's call should name for a heap array.
 */
#include <stdint.h>

#include "client/client_internal.h"
#include "shm/desc.h"

int mxop__lookup_for_sibling(mxop_client_t *c, const mxop_array_t *a, uint32_t *id,
                             uint64_t *offset, int *read_only)
{
    char why[64];
    uint64_t span, elems;
    *read_only = 0;
    if (a->region != MXOP_REGION_HEAP) {
        pthread_mutex_lock(&c->regions_lock);
        const mxop__region_t *e = mxop__region_find(c, a->region);
        *read_only = e != NULL && e->read_only;
        pthread_mutex_unlock(&c->regions_lock);
        *id = a->region;
        *offset = a->offset;
        return 1;
    }
    if (a->data == NULL ||
        mxop__desc_span(a->dtype, a->ndim, a->shape, NULL, &span, &elems, why, sizeof why) < 0 ||
        span == 0)
        return 0;
    int shared = 0;
    pthread_mutex_lock(&c->regions_lock);
    int in = mxop__lookup_find(c, a->data, span, id, offset, &shared) && !shared;
    if (in) {
        const mxop__region_t *e = mxop__region_find(c, *id);
        *read_only = e != NULL && e->read_only;
    }
    pthread_mutex_unlock(&c->regions_lock);
    return in;
}

int mxop_region_lookup(mxop_client_t *c, const void *p, size_t n, uint32_t *region,
                       uint64_t *offset)
{
    if (c == NULL || p == NULL || (uintptr_t)p > UINTPTR_MAX - n)
        return MXOP_EINVAL;
    uint32_t id = 0;
    uint64_t off = 0;
    int shared = 0;
    pthread_mutex_lock(&c->regions_lock);
    int in = mxop__lookup_find(c, p, n > 0 ? n : 1, &id, &off, &shared);
    pthread_mutex_unlock(&c->regions_lock);
    /* A block freed (its region not yet revoked) holds no tensor any more. */
    if (in && shared && !mxop_shared_contains(p, n > 0 ? n : 1))
        in = 0;
    if (!in)
        return 0;
    if (region != NULL)
        *region = id;
    if (offset != NULL)
        *offset = off;
    return 1;
}
