/*
 * client/arena.c - mxop_array_alloc/free: tensor buffers carved out of
 * shared memory chunks the client registers with the session.
 *
 * Each chunk is one region of at least 16 MiB, so that most arrays cost no
 * round trip to the daemon.  A chunk is tiled by segments in offset order,
 * each used or free: allocation takes the first free segment that fits
 * (splitting it), freeing marks a segment free and merges it with free
 * neighbours.  Keeping the used segments in the same table means a free
 * of something the arena never gave out (or a double free) is recognised
 * and ignored instead of corrupting the lists.  Chunks live until
 * mxop_close: their pages stay mapped in the worker and warm.
 */
#include <stdlib.h>
#include <string.h>

#include "client/client_internal.h"
#include "common/util.h"
#include "shm/desc.h"

static uint64_t round_up(uint64_t v, uint64_t to)
{
    return (v + to - 1) / to * to;
}

static int segs_reserve(mxop_client_t *c, mxop__chunk_t *ch, size_t extra)
{
    if (ch->nsegs + extra <= ch->capsegs)
        return 0;
    size_t cap = ch->capsegs ? ch->capsegs * 2 : 16;
    while (cap < ch->nsegs + extra)
        cap *= 2;
    mxop__seg_t *s = realloc(ch->segs, cap * sizeof *s);
    if (s == NULL)
        return mxop__fail(c, MXOP_ENOMEM, "out of memory growing the arena's block table");
    ch->segs = s;
    ch->capsegs = cap;
    return 0;
}

/* First fit in one chunk; returns the offset or UINT64_MAX. */
static uint64_t chunk_alloc(mxop_client_t *c, mxop__chunk_t *ch, uint64_t need)
{
    for (size_t i = 0; i < ch->nsegs; i++) {
        mxop__seg_t *s = &ch->segs[i];
        if (s->used || s->size < need)
            continue;
        if (s->size > need) {
            /* Split: the tail stays free right after the new block. */
            if (segs_reserve(c, ch, 1) < 0)
                return UINT64_MAX;
            s = &ch->segs[i];
            memmove(&ch->segs[i + 2], &ch->segs[i + 1], (ch->nsegs - i - 1) * sizeof *s);
            ch->segs[i + 1] = (mxop__seg_t){.off = s->off + need, .size = s->size - need};
            ch->nsegs++;
            s->size = need;
        }
        s->used = 1;
        return s->off;
    }
    return UINT64_MAX;
}

static int chunk_new(mxop_client_t *c, uint64_t need, mxop__chunk_t **out)
{
    int rc;
    if (c->nchunks == c->capchunks) {
        size_t cap = c->capchunks ? c->capchunks * 2 : 4;
        mxop__chunk_t *a = realloc(c->chunks, cap * sizeof *a);
        if (a == NULL)
            return mxop__fail(c, MXOP_ENOMEM, "out of memory growing the arena");
        c->chunks = a;
        c->capchunks = cap;
    }
    uint64_t size = round_up(need, MXOP__ARENA_CHUNK_ROUND);
    if (size < MXOP__ARENA_CHUNK_MIN)
        size = MXOP__ARENA_CHUNK_MIN;
    if (size > SIZE_MAX)
        return mxop__fail(c, MXOP_ESHM, "an array of %llu bytes does not fit in memory",
                          (unsigned long long)need);

    mxop__chunk_t ch = {0};
    rc = segs_reserve(c, &ch, 1);
    if (rc < 0)
        return rc;
    mxop__region_t *e;
    rc = mxop__region_new(c, (size_t)size, MXOP__REGION_ARENA, &e);
    if (rc < 0) {
        free(ch.segs);
        /* Every way a chunk cannot be had is, to the caller, no memory. */
        return rc == MXOP_EDISCONNECTED ? rc : MXOP_ESHM;
    }
    ch.region = e->id;
    ch.base = e->base;
    ch.size = size;
    ch.segs[0] = (mxop__seg_t){.off = 0, .size = size, .used = 0};
    ch.nsegs = 1;
    c->chunks[c->nchunks++] = ch;
    *out = &c->chunks[c->nchunks - 1];
    return 0;
}

/*
 * With a pool of sessions (pool.c) an allocation that fits in the chunks
 * there are takes only the arena's lock, so that a thread allocates its
 * outputs while another thread's call holds the client.  Anything else
 * (a bad argument, a new chunk) takes the ordinary path under c->lock.
 * Returns 0 when done.
 */
static int quick_alloc(mxop_client_t *c, int32_t dtype, int32_t ndim, const int64_t *shape,
                       mxop_array_t *out)
{
    char why[64];
    uint64_t span, elems;
    if (out == NULL || mxop_dtype_size(dtype) == 0 || ndim < 0 || ndim > MXOP_MAX_DIMS ||
        (ndim > 0 && shape == NULL) ||
        mxop__desc_span(dtype, ndim, shape, NULL, &span, &elems, why, sizeof why) < 0 ||
        span > SIZE_MAX - 2 * MXOP__ARENA_CHUNK_ROUND)
        return -1;
    uint64_t need = round_up(span ? span : 1, MXOP__ARENA_ALIGN);
    pthread_mutex_lock(&c->arena_lock);
    mxop__chunk_t *ch = NULL;
    uint64_t off = UINT64_MAX;
    for (size_t i = 0; i < c->nchunks && off == UINT64_MAX; i++) {
        ch = &c->chunks[i];
        /* Only where no segment table must grow (that may fail, and say so in c->err). */
        if (ch->nsegs < ch->capsegs)
            off = chunk_alloc(c, ch, need);
    }
    if (off != UINT64_MAX) {
        memset(out, 0, sizeof *out);
        out->data = ch->base + off;
        out->dtype = dtype;
        out->ndim = ndim;
        for (int32_t i = 0; i < ndim; i++)
            out->shape[i] = shape[i];
        out->region = ch->region;
        out->offset = off;
        out->nbytes = (size_t)span;
        out->req = MXOP_REQ_WRITE;
    }
    pthread_mutex_unlock(&c->arena_lock);
    return off != UINT64_MAX ? 0 : -1;
}

int mxop_array_alloc(mxop_client_t *c, int32_t dtype, int32_t ndim, const int64_t *shape,
                     mxop_array_t *out)
{
    if (c == NULL)
        return MXOP_EINVAL;
    if (mxop__outputs_alloc(c, dtype, ndim, shape, out) == 0)
        return 0;
    if (c->pool != NULL && quick_alloc(c, dtype, ndim, shape, out) == 0)
        return 0;
    pthread_mutex_lock(&c->lock);
    pthread_mutex_lock(&c->arena_lock);
    int rc;
    char why[256];
    uint64_t span, elems;

    if (out == NULL) {
        rc = mxop__fail(c, MXOP_EINVAL, "mxop_array_alloc: out is NULL");
        goto out;
    }
    memset(out, 0, sizeof *out);
    if (mxop_dtype_size(dtype) == 0) {
        rc = mxop__fail(c, MXOP_EINVAL, "mxop_array_alloc: unknown dtype %d", (int)dtype);
        goto out;
    }
    if (ndim < 0 || ndim > MXOP_MAX_DIMS) {
        rc = mxop__fail(c, MXOP_EINVAL, "mxop_array_alloc: ndim %d is outside [0, %d]", (int)ndim,
                        MXOP_MAX_DIMS);
        goto out;
    }
    if (ndim > 0 && shape == NULL) {
        rc = mxop__fail(c, MXOP_EINVAL, "mxop_array_alloc: shape is NULL with ndim %d", (int)ndim);
        goto out;
    }
    why[0] = '\0';
    rc = mxop__desc_span(dtype, ndim, shape, NULL, &span, &elems, why, sizeof why);
    if (rc < 0) {
        rc = mxop__fail(c, MXOP_EINVAL, "mxop_array_alloc: %s", why);
        goto out;
    }
    if (span > SIZE_MAX - 2 * MXOP__ARENA_CHUNK_ROUND) {
        rc = mxop__fail(c, MXOP_ESHM, "mxop_array_alloc: %llu bytes is too large",
                        (unsigned long long)span);
        goto out;
    }

    /* An empty array still gets a block of its own, so that it has a valid,
     * distinct offset and frees like any other. */
    uint64_t need = round_up(span ? span : 1, MXOP__ARENA_ALIGN);
    mxop__chunk_t *ch = NULL;
    uint64_t off = UINT64_MAX;
    for (size_t i = 0; i < c->nchunks && off == UINT64_MAX; i++) {
        ch = &c->chunks[i];
        off = chunk_alloc(c, ch, need);
    }
    if (off == UINT64_MAX) {
        rc = chunk_new(c, need, &ch);
        if (rc < 0) {
            if (rc == MXOP_ESHM)
                mxop__fail(c, rc, "no shared memory for an array of %llu bytes: %s",
                           (unsigned long long)span, c->err);
            goto out;
        }
        off = chunk_alloc(c, ch, need);
        if (off == UINT64_MAX) {
            rc = MXOP_ENOMEM;
            goto out;
        }
    }

    out->data = ch->base + off;
    out->dtype = dtype;
    out->ndim = ndim;
    for (int32_t i = 0; i < ndim; i++)
        out->shape[i] = shape[i];
    out->region = ch->region;
    out->offset = off;
    out->nbytes = (size_t)span;
    out->req = MXOP_REQ_WRITE;
    rc = 0;
out:
    pthread_mutex_unlock(&c->arena_lock);
    pthread_mutex_unlock(&c->lock);
    return rc;
}

/* Finds the used segment starting at `off` (binary search by offset). */
static size_t seg_find(const mxop__chunk_t *ch, uint64_t off)
{
    size_t lo = 0, hi = ch->nsegs;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (ch->segs[mid].off < off)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < ch->nsegs && ch->segs[lo].off == off ? lo : SIZE_MAX;
}

void mxop_array_free(mxop_client_t *c, mxop_array_t *a)
{
    if (a == NULL)
        return;
    /* A shared-heap array (mxop_shared_outputs) is the heap's, whatever became of c. */
    if (a->region == MXOP_REGION_HEAP) {
        if (a->data != NULL)
            (void)mxop_shared_free(a->data);
        memset(a, 0, sizeof *a);
        return;
    }
    if (c == NULL)
        return;
    /* With a pool, the arena's lock alone (see quick_alloc). */
    int whole = c->pool == NULL;
    if (whole)
        pthread_mutex_lock(&c->lock);
    pthread_mutex_lock(&c->arena_lock);
    mxop__chunk_t *ch = NULL;
    for (size_t i = 0; i < c->nchunks; i++)
        if (a->region != MXOP_REGION_HEAP && c->chunks[i].region == a->region)
            ch = &c->chunks[i];
    if (ch == NULL || a->data != ch->base + a->offset)
        goto done;
    size_t i = seg_find(ch, a->offset);
    if (i == SIZE_MAX || !ch->segs[i].used)
        goto done;

    ch->segs[i].used = 0;
    /* Merge with the next segment, then with the previous one. */
    if (i + 1 < ch->nsegs && !ch->segs[i + 1].used) {
        ch->segs[i].size += ch->segs[i + 1].size;
        memmove(&ch->segs[i + 1], &ch->segs[i + 2], (ch->nsegs - i - 2) * sizeof ch->segs[0]);
        ch->nsegs--;
    }
    if (i > 0 && !ch->segs[i - 1].used) {
        ch->segs[i - 1].size += ch->segs[i].size;
        memmove(&ch->segs[i], &ch->segs[i + 1], (ch->nsegs - i - 1) * sizeof ch->segs[0]);
        ch->nsegs--;
    }
done:
    /* Whatever it was, the array is zeroed, so that a second free of the
     * same struct is harmless. */
    memset(a, 0, sizeof *a);
    pthread_mutex_unlock(&c->arena_lock);
    if (whole)
        pthread_mutex_unlock(&c->lock);
}

void mxop__arena_free_all(mxop_client_t *c)
{
    /* The regions themselves are unmapped with the region table. */
    for (size_t i = 0; i < c->nchunks; i++)
        free(c->chunks[i].segs);
    free(c->chunks);
    c->chunks = NULL;
    c->nchunks = c->capchunks = 0;
}
