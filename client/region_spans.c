/*
 * client/region_spans.c - the address spans of the client's regions, so
 * that a heap array (region MXOP_REGION_HEAP) in memory the client maps
 * itself goes to a call by reference: bindings fill in a pointer and never
 * keep tables of regions of their own.  Kept by the region table
 * (regions.c) as its entries come and go; asked by the call path and by
 * region_lookup.c.  It calls nothing of the client's.
 *
 * The spans are the mappings of the region table's entries a heap array
 * may lie in (arena chunks, user regions with a mapping here, shared-heap
 * blocks registered with the session), sorted by address.  They never
 * overlap: each is a mapping of its own, and mxop_region_register_fd_at
 * refuses a range that meets one.  A lookup is a binary search with no
 * allocation (room is reserved with the table, regions.c), read under
 * either lock of the table: a call holds c->lock, mxop_region_lookup
 * takes regions_lock alone so that it does not wait for a call.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "client/client_internal.h"

int mxop__lookup_reserve(mxop_client_t *c, size_t cap)
{
    if (cap <= c->capspans)
        return 0;
    mxop__span_t *s = realloc(c->spans, cap * sizeof *s);
    if (s == NULL)
        return -1;
    c->spans = s;
    c->capspans = cap;
    return 0;
}

/* The index of the first span whose start is above p (0..nspans). */
static size_t upper(const mxop_client_t *c, uintptr_t p)
{
    size_t lo = 0, hi = c->nspans;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (c->spans[mid].lo <= p)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

void mxop__lookup_add(mxop_client_t *c, const mxop__region_t *e)
{
    /*
     * The staging region is the client's own scratch space, never an
     * engine's tensor; a device region's base is a device pointer; an
     * entry without a mapping here has nothing a pointer could lie in.
     */
    if (e->base == NULL || e->cuda || e->kind == MXOP__REGION_STAGE || e->size == 0)
        return;
    /* Room is reserved with the table; without it the region is only staged, never wrong. */
    if (c->nspans == c->capspans)
        return;
    uintptr_t lo = (uintptr_t)e->base;
    size_t i = upper(c, lo);
    memmove(&c->spans[i + 1], &c->spans[i], (c->nspans - i) * sizeof *c->spans);
    c->spans[i] = (mxop__span_t){
        .lo = lo, .hi = lo + e->size, .id = e->id, .shared = e->kind == MXOP__REGION_SHARED};
    c->nspans++;
}

void mxop__lookup_remove(mxop_client_t *c, uint32_t id)
{
    for (size_t i = 0; i < c->nspans; i++)
        if (c->spans[i].id == id) {
            memmove(&c->spans[i], &c->spans[i + 1], (c->nspans - i - 1) * sizeof *c->spans);
            c->nspans--;
            return;
        }
}

void mxop__lookup_free(mxop_client_t *c)
{
    free(c->spans);
    c->spans = NULL;
    c->nspans = c->capspans = 0;
}

int mxop__lookup_find(const mxop_client_t *c, const void *p, uint64_t n, uint32_t *id,
                      uint64_t *offset, int *shared)
{
    uintptr_t a = (uintptr_t)p;
    size_t i = upper(c, a);
    if (i == 0)
        return 0;
    const mxop__span_t *s = &c->spans[i - 1];
    /* a >= s->lo here; the test is written so that no sum can wrap. */
    if (a >= s->hi || n > s->hi - a)
        return 0;
    *id = s->id;
    *offset = a - s->lo;
    *shared = s->shared;
    return 1;
}

int mxop__lookup_overlaps(const mxop_client_t *c, const void *p, uint64_t n)
{
    uintptr_t a = (uintptr_t)p;
    /* The span starting at or below a, and the first one above it. */
    size_t i = upper(c, a);
    if (i > 0 && c->spans[i - 1].hi > a)
        return 1;
    return i < c->nspans && c->spans[i].lo - a < n;
}
