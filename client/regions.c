/*
 * client/regions.c - shared memory regions registered with the session,
 * and arrays viewed inside them.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "client/client_internal.h"
#include "common/util.h"
#include "shm/desc.h"
#include "shm/region.h"

mxop__region_t *mxop__region_find(mxop_client_t *c, uint32_t id)
{
    if (id == MXOP_REGION_HEAP)
        return NULL;
    /*
     * A session with the shared heap on holds a region per block passed: a
     * binary search first.  Ids mostly grow in the order regions are added,
     * but not always (after a reconnection), so a miss is looked for in
     * the whole table.
     */
    if (c->nregions > 8) {
        size_t lo = 0, hi = c->nregions;
        while (lo < hi) {
            size_t mid = lo + (hi - lo) / 2;
            if (c->regions[mid].id == id)
                return &c->regions[mid];
            if (c->regions[mid].id < id)
                lo = mid + 1;
            else
                hi = mid;
        }
    }
    for (size_t i = 0; i < c->nregions; i++)
        if (c->regions[i].id == id)
            return &c->regions[i];
    return NULL;
}

uint32_t mxop__region_wire(mxop_client_t *c, uint32_t id)
{
    const mxop__region_t *r = mxop__region_find(c, id);
    return r != NULL ? r->wire : id;
}

/*
 * The engine's id for a region the daemon calls `wire`: the same, unless
 * the engine holds that id already for another region (after a
 * reconnection the daemon counts from 1 again).
 */
static uint32_t public_id(mxop_client_t *c, uint32_t wire)
{
    if (mxop__region_find(c, wire) == NULL)
        return wire;
    uint32_t top = 0;
    for (size_t i = 0; i < c->nregions; i++)
        if (c->regions[i].id > top)
            top = c->regions[i].id;
    return top + 1;
}

static int table_reserve(mxop_client_t *c)
{
    if (c->nregions < c->capregions)
        return 0;
    size_t cap = c->capregions ? c->capregions * 2 : 16;
    pthread_mutex_lock(&c->regions_lock);
    /* The spans first: once they have room, adding an entry allocates nothing. */
    mxop__region_t *r =
        mxop__lookup_reserve(c, cap) == 0 ? realloc(c->regions, cap * sizeof *r) : NULL;
    if (r != NULL) {
        c->regions = r;
        c->capregions = cap;
    }
    pthread_mutex_unlock(&c->regions_lock);
    if (r == NULL)
        return mxop__fail(c, MXOP_ENOMEM, "out of memory growing the region table");
    return 0;
}

/*
 * Appends entry `e` (its id given by public_id from its wire id) to the
 * table, whose room table_reserve made; returns it in place.
 */
static mxop__region_t *entry_append(mxop_client_t *c, mxop__region_t e)
{
    pthread_mutex_lock(&c->regions_lock);
    e.id = public_id(c, e.wire);
    mxop__region_t *p = &c->regions[c->nregions++];
    *p = e;
    mxop__lookup_add(c, p);
    pthread_mutex_unlock(&c->regions_lock);
    return p;
}

int mxop__region_reserve(mxop_client_t *c)
{
    return table_reserve(c);
}

static int release_id(mxop_client_t *c, uint32_t id);

/*
 * Sends RegisterRegion with `fd` attached; *id gets the daemon's id.
 * `scratch`: the staging region, which the worker may write in scratch mode
 * too.  `reserve_from`: the bytes of the memfd before it are not reserved
 * yet; they are reserved here while the request is on its way, from the
 * top down, MXOP__REGION_RESERVE_STEP at a time, and a failure to reserve
 * them releases the region again.  The worker leaves them alone until a
 * call writes there (shm/region.h), or, with a mailbox, until the
 * mailbox's reserve words say they are reserved: written here after each
 * step, so that the worker faults in each part while the next is reserved.
 * The caller holds c->lock, which keeps the mailbox in place.
 */
static int register_fd(mxop_client_t *c, int fd, size_t bytes, int scratch, size_t reserve_from,
                       uint32_t *id)
{
    /* A daemon that went away is reconnected first (before the mailbox is read below). */
    int rc = mxop__reconnect_if_gone(c);
    if (rc < 0)
        return rc;
    Mxop__RegisterRegion body = MXOP__REGISTER_REGION__INIT;
    body.size = bytes;
    body.scratch = scratch != 0;
    body.reserved_from = reserve_from;
    Mxop__Request req = MXOP__REQUEST__INIT;
    req.body_case = MXOP__REQUEST__BODY_REGISTER_REGION;
    req.register_region = &body;

    /* The worker's mailbox, where it reads how far this reservation has come. */
    mxop__mbox_shared_t *sh = c->sess.chan == MXOP__CHAN_MBOX ? c->mbox.sh : NULL;
    struct stat st;
    if (reserve_from == 0 || fstat(fd, &st) != 0)
        sh = NULL;
    if (sh != NULL) {
        /* The offset first: a worker that sees the inode reads this region's progress. */
        atomic_store_explicit(&sh->reserve_from, (uint64_t)reserve_from, memory_order_relaxed);
        atomic_store_explicit(&sh->reserve_ino, (uint64_t)st.st_ino, memory_order_release);
    }
    rc = mxop__ctl_send(c, &req, &fd, 1);
    if (rc < 0)
        return rc;
    int reserved = 0;
    for (size_t from = reserve_from; from > 0 && reserved == 0;) {
        size_t step = from < MXOP__REGION_RESERVE_STEP ? from : MXOP__REGION_RESERVE_STEP;
        reserved = mxop__region_reserve_pages(fd, from - step, step);
        if (reserved == 0) {
            from -= step;
            if (sh != NULL)
                atomic_store_explicit(&sh->reserve_from, (uint64_t)from, memory_order_release);
        }
    }
    int reserve_errno = errno;
    Mxop__Reply *r;
    rc = mxop__ctl_await(c, req.id, mxop__ctl_timeout(c), &r, NULL);
    if (rc < 0)
        return rc;
    if (r->body_case != MXOP__REPLY__BODY_REGISTER_REGION || r->register_region == NULL ||
        r->register_region->region == MXOP_REGION_HEAP)
        return mxop__fail(c, MXOP_EPROTOCOL,
                          "mxop-serverd answered RegisterRegion without a region id");
    *id = r->register_region->region;
    if (reserved != 0) {
        (void)release_id(c, *id);
        return mxop__fail(c, MXOP_ESHM,
                          "cannot reserve the first %zu of the %zu bytes of a shared memory "
                          "region: %s",
                          reserve_from, bytes, strerror(reserve_errno));
    }
    return 0;
}

static int release_id(mxop_client_t *c, uint32_t id)
{
    Mxop__ReleaseRegion body = MXOP__RELEASE_REGION__INIT;
    body.region = id;
    Mxop__Request req = MXOP__REQUEST__INIT;
    req.body_case = MXOP__REQUEST__BODY_RELEASE_REGION;
    req.release_region = &body;
    Mxop__Reply *r;
    return mxop__ctl_request(c, &req, NULL, 0, mxop__ctl_timeout(c), &r, NULL);
}

struct mxop__region_copy {
    mxop_client_t *c; /* a sibling of the pool (pool.c) */
    uint32_t id;      /* the region's id there */
};

/*
 * Frees e's mappings and descriptor.  Its copies' array goes too, without a
 * word to the siblings: drop_copies has released them, or (at mxop_close)
 * the siblings are closed, their regions gone with their sessions.
 */
static void entry_free(mxop__region_t *e)
{
    free(e->copies);
    if (e->cmap_owned)
        mxop__region_unmap(e->cmap, e->size);
    if (e->owned)
        mxop__region_unmap(e->base, e->size);
    if (e->fd >= 0 && e->kind != MXOP__REGION_SHARED)
        close(e->fd);
}

int mxop__region_new(mxop_client_t *c, size_t bytes, int kind, mxop__region_t **out)
{
    int rc, fd = -1;
    void *base = NULL;
    uint32_t id;

    rc = table_reserve(c);
    if (rc < 0)
        return rc;
    /* The lower part of a large one is reserved while its registration is on its way. */
    size_t split = mxop__region_split(bytes, c->sess.chan == MXOP__CHAN_MBOX && c->mbox.sh != NULL);
    rc = mxop__region_create_fd_sealable(kind == MXOP__REGION_USER    ? "mxop-region"
                                         : kind == MXOP__REGION_ARENA ? "mxop-arena"
                                                                      : "mxop-stage",
                                         bytes, 1, split, &fd);
    if (rc < 0)
        return mxop__fail(c, rc, "cannot create a shared memory region of %zu bytes", bytes);
    rc = mxop__region_map(fd, bytes, 1, &base);
    if (rc < 0) {
        mxop__fail(c, rc, "cannot map a shared memory region of %zu bytes", bytes);
        goto err_fd;
    }
    rc = register_fd(c, fd, bytes, kind == MXOP__REGION_STAGE, split, &id);
    if (rc < 0)
        goto err_map;

    *out = entry_append(c, (mxop__region_t){.wire = id,
                                            .fd = fd,
                                            .base = base,
                                            .size = bytes,
                                            .owned = 1,
                                            .kind = kind,
                                            .device = -1,
                                            .cmap = base});
    return 0;

err_map:
    mxop__region_unmap(base, bytes);
err_fd:
    close(fd);
    return rc;
}

uint32_t mxop__region_copy_find(mxop_client_t *c, uint32_t id, mxop_client_t *sc)
{
    uint32_t sid = 0;
    pthread_mutex_lock(&c->regions_lock);
    const mxop__region_t *e = mxop__region_find(c, id);
    for (int k = 0; e != NULL && k < e->ncopies; k++)
        if (e->copies[k].c == sc)
            sid = e->copies[k].id;
    pthread_mutex_unlock(&c->regions_lock);
    return sid;
}

int mxop__region_copy_add(mxop_client_t *c, uint32_t id, mxop_client_t *sc, uint32_t sid)
{
    int rc = -1;
    pthread_mutex_lock(&c->regions_lock);
    mxop__region_t *e = mxop__region_find(c, id);
    if (e != NULL && e->copies == NULL)
        e->copies = calloc(MXOP__POOL_MAX, sizeof *e->copies);
    if (e != NULL && e->copies != NULL && e->ncopies < MXOP__POOL_MAX) {
        e->copies[e->ncopies++] = (struct mxop__region_copy){.c = sc, .id = sid};
        rc = 0;
    }
    pthread_mutex_unlock(&c->regions_lock);
    return rc;
}

/*
 * Releases the siblings' registrations of region `id` (c->lock held, so the
 * entry stays); a sibling busy with a call is waited for.
 */
static void drop_copies(mxop_client_t *c, uint32_t id)
{
    struct mxop__region_copy copies[MXOP__POOL_MAX];
    int n = 0;
    pthread_mutex_lock(&c->regions_lock);
    mxop__region_t *e = mxop__region_find(c, id);
    if (e != NULL && e->ncopies > 0) {
        n = e->ncopies;
        memcpy(copies, e->copies, (size_t)n * sizeof *copies);
        e->ncopies = 0;
    }
    pthread_mutex_unlock(&c->regions_lock);
    for (int k = 0; k < n; k++)
        (void)mxop_region_release(copies[k].c, copies[k].id);
}

int mxop__region_drop(mxop_client_t *c, uint32_t id)
{
    mxop__region_t *e = mxop__region_find(c, id);
    if (e == NULL)
        return mxop__fail(c, MXOP_EUNKNOWN_REGION, "no region %u in this session", id);
    /* A daemon that went away is reconnected first, so that the release goes to the right one. */
    (void)mxop__reconnect_if_gone(c);
    e = mxop__region_find(c, id);
    int rc = release_id(c, e->wire);
    /* A daemon that is gone has dropped the region with the session. */
    if (rc < 0 && rc != MXOP_EDISCONNECTED)
        return rc;
    drop_copies(c, id);
    pthread_mutex_lock(&c->regions_lock);
    e = mxop__region_find(c, id); /* the table is unchanged, but be plain */
    mxop__lookup_remove(c, id);
    entry_free(e);
    size_t i = (size_t)(e - c->regions);
    memmove(&c->regions[i], &c->regions[i + 1], (c->nregions - i - 1) * sizeof *e);
    c->nregions--;
    pthread_mutex_unlock(&c->regions_lock);
    return 0;
}

/* Takes entry e out of the table (c->lock held). */
static void entry_remove(mxop_client_t *c, mxop__region_t *e)
{
    pthread_mutex_lock(&c->regions_lock);
    mxop__lookup_remove(c, e->id);
    entry_free(e);
    size_t i = (size_t)(e - c->regions);
    memmove(&c->regions[i], &c->regions[i + 1], (c->nregions - i - 1) * sizeof *e);
    c->nregions--;
    pthread_mutex_unlock(&c->regions_lock);
}

void mxop__region_forget(mxop_client_t *c, uint32_t id)
{
    mxop__region_t *e = mxop__region_find(c, id);
    if (e == NULL)
        return;
    drop_copies(c, id);
    entry_remove(c, e);
}

int mxop__region_add_block(mxop_client_t *c, int fd, void *base, size_t size, uint32_t *id)
{
    int rc = table_reserve(c);
    if (rc < 0)
        return rc;
    uint32_t wire;
    rc = register_fd(c, fd, size, 0, 0, &wire);
    if (rc < 0)
        return rc;
    /* The fd is borrowed: kept for a registration again after a reconnection, never closed
     * here.  Scratch mode copies outputs into place through the heap's mapping (cmap),
     * writable whatever the daemon seals. */
    *id = entry_append(c, (mxop__region_t){.wire = wire,
                                           .fd = fd,
                                           .base = base,
                                           .size = size,
                                           .kind = MXOP__REGION_SHARED,
                                           .device = -1,
                                           .cmap = base})
              ->id;
    return 0;
}

void mxop__regions_free(mxop_client_t *c)
{
    pthread_mutex_lock(&c->regions_lock);
    for (size_t i = 0; i < c->nregions; i++)
        entry_free(&c->regions[i]);
    free(c->regions);
    c->regions = NULL;
    c->nregions = c->capregions = 0;
    mxop__lookup_free(c);
    pthread_mutex_unlock(&c->regions_lock);
}

int mxop__regions_reregister(mxop_client_t *c)
{
    for (size_t i = 0; i < c->nregions; i++) {
        mxop__region_t *e = &c->regions[i];
        if (e->fd < 0)
            continue; /* a device region, or a borrowed fd not kept: calls name it unknown */
        uint32_t wire;
        int rc = register_fd(c, e->fd, e->size, e->kind == MXOP__REGION_STAGE, 0, &wire);
        if (rc < 0) {
            char why[MXOP__ERR_MAX];
            memcpy(why, c->err, sizeof why);
            return mxop__fail(c, rc, "registering region %u again: %s", e->id, why);
        }
        pthread_mutex_lock(&c->regions_lock);
        e->wire = wire;
        pthread_mutex_unlock(&c->regions_lock);
    }
    return 0;
}

int mxop_region_create(mxop_client_t *c, size_t bytes, uint32_t *region, void **base)
{
    if (c == NULL)
        return MXOP_EINVAL;
    pthread_mutex_lock(&c->lock);
    int rc;
    if (region == NULL || base == NULL) {
        rc = mxop__fail(c, MXOP_EINVAL, "mxop_region_create: %s is NULL",
                        region == NULL ? "region" : "base");
        goto out;
    }
    *region = 0;
    *base = NULL;
    if (bytes == 0) {
        rc = mxop__fail(c, MXOP_EINVAL, "mxop_region_create: bytes is 0");
        goto out;
    }
    mxop__region_t *e;
    rc = mxop__region_new(c, bytes, MXOP__REGION_USER, &e);
    if (rc == 0) {
        *region = e->id;
        *base = e->base;
    }
out:
    pthread_mutex_unlock(&c->lock);
    return rc;
}

/*
 * `shared_cmap`: a writable mapping of the same memory that another client
 * of this process owns (a pool's sibling registering its client's region,
 * pool.c): used, never unmapped here.  Once the other session ran an
 * untrusted library its memfds are sealed against new writable mappings,
 * so the sibling could not make its own.
 */
static int register_fd_common(mxop_client_t *c, int fd, size_t bytes, uint32_t *region, void **base,
                              void *shared_cmap, void *at)
{
    if (c == NULL)
        return MXOP_EINVAL;
    pthread_mutex_lock(&c->lock);
    int rc;
    void *map = NULL;
    char why[256];

    if (region == NULL) {
        rc = mxop__fail(c, MXOP_EINVAL, "mxop_region_register_fd: region is NULL");
        goto out;
    }
    *region = 0;
    if (base != NULL)
        *base = NULL;
    if (fd < 0) {
        rc = mxop__fail(c, MXOP_EINVAL, "mxop_region_register_fd: fd %d is not a descriptor", fd);
        goto out;
    }
    if (bytes == 0) {
        rc = mxop__fail(c, MXOP_EINVAL, "mxop_region_register_fd: bytes is 0");
        goto out;
    }
    why[0] = '\0';
    rc = mxop__region_check_fd(fd, bytes, why, sizeof why);
    if (rc < 0) {
        rc = mxop__fail(c, MXOP_EINVAL, "fd %d cannot back a region of %zu bytes: %s", fd, bytes,
                        why);
        goto out;
    }
    rc = table_reserve(c);
    if (rc < 0)
        goto out;
    if (at != NULL) {
        /* A pointer must name one region: two mappings of the engine's never overlap. */
        pthread_mutex_lock(&c->regions_lock);
        int meets = mxop__lookup_overlaps(c, at, bytes);
        pthread_mutex_unlock(&c->regions_lock);
        if (meets) {
            rc = mxop__fail(c, MXOP_EINVAL,
                            "mxop_region_register_fd_at: [%p, +%zu) overlaps a region already "
                            "registered with this client",
                            at, bytes);
            goto out;
        }
    }
    if (base != NULL) {
        rc = mxop__region_map(fd, bytes, 1, &map);
        if (rc < 0) {
            rc = mxop__fail(c, MXOP_EINVAL, "fd %d cannot be mapped read-write (%zu bytes)", fd,
                            bytes);
            goto out;
        }
    }
    /*
     * In scratch mode the client copies outputs into the region, so it needs a writable
     * mapping of its own, made now: once the session runs an untrusted library the daemon
     * seals a memfd against new writable mappings.  A descriptor that cannot be mapped
     * writable gets none (outputs into it are then refused in scratch mode).
     */
    void *cmap = shared_cmap != NULL ? shared_cmap : map;
    if (cmap == NULL && mxop__region_map(fd, bytes, 1, &cmap) < 0)
        cmap = NULL;
    /* The fd stays the caller's: SCM_RIGHTS gives the daemon its own copy. */
    uint32_t id;
    rc = register_fd(c, fd, bytes, 0, 0, &id);
    if (rc < 0) {
        if (cmap != map && cmap != shared_cmap)
            mxop__region_unmap(cmap, bytes);
        goto err_map;
    }

    /* With a pool, a copy of the fd is kept (closed at release): the
     * siblings register the region from it when a call there uses it. */
    int keep = c->pool != NULL || mxop__reconnect_enabled(c) ? dup(fd) : -1;
    *region = entry_append(c, (mxop__region_t){.wire = id,
                                               .fd = keep,
                                               .base = at != NULL ? at : map,
                                               .size = bytes,
                                               .owned = map != NULL,
                                               .kind = MXOP__REGION_USER,
                                               .device = -1,
                                               .cmap = cmap,
                                               .cmap_owned = cmap != NULL && cmap != map &&
                                                             cmap != shared_cmap})
                  ->id;
    if (base != NULL)
        *base = map;
    goto out;

err_map:
    mxop__region_unmap(map, bytes);
out:
    pthread_mutex_unlock(&c->lock);
    return rc;
}

int mxop_region_register_fd(mxop_client_t *c, int fd, size_t bytes, uint32_t *region, void **base)
{
    return register_fd_common(c, fd, bytes, region, base, NULL, NULL);
}

int mxop_region_register_fd_at(mxop_client_t *c, int fd, size_t bytes, void *base, uint32_t *region)
{
    if (c != NULL && base == NULL) {
        pthread_mutex_lock(&c->lock);
        int rc = mxop__fail(c, MXOP_EINVAL, "mxop_region_register_fd_at: base is NULL");
        pthread_mutex_unlock(&c->lock);
        return rc;
    }
    return register_fd_common(c, fd, bytes, region, NULL, NULL, base);
}

int mxop__region_register_shared(mxop_client_t *c, int fd, size_t bytes, void *cmap,
                                 uint32_t *region)
{
    return register_fd_common(c, fd, bytes, region, NULL, cmap, NULL);
}

int mxop_region_release(mxop_client_t *c, uint32_t region)
{
    if (c == NULL)
        return MXOP_EINVAL;
    pthread_mutex_lock(&c->lock);
    int rc;
    mxop__region_t *e = mxop__region_find(c, region);
    if (e == NULL)
        rc = mxop__fail(c, MXOP_EUNKNOWN_REGION, "no region %u in this session", region);
    else if (e->kind == MXOP__REGION_SHARED)
        rc = mxop__fail(c, MXOP_EINVAL,
                        "region %u is a shared-heap block; mxop_shared_free releases it", region);
    else if (e->kind != MXOP__REGION_USER)
        rc = mxop__fail(c, MXOP_EINVAL,
                        "region %u belongs to the client's array arena; free its arrays instead",
                        region);
    else
        rc = mxop__region_drop(c, region);
    pthread_mutex_unlock(&c->lock);
    return rc;
}

int mxop_region_set_read_only(mxop_client_t *c, uint32_t region, int read_only)
{
    if (c == NULL)
        return MXOP_EINVAL;
    pthread_mutex_lock(&c->lock);
    int rc = 0;
    mxop__region_t *e = mxop__region_find(c, region);
    if (e == NULL)
        rc = mxop__fail(c, MXOP_EUNKNOWN_REGION,
                        "mxop_region_set_read_only: no region %u in this "
                        "session",
                        region);
    else {
        /* Under the table's lock too: a pool's sibling call reads the mark without c->lock. */
        pthread_mutex_lock(&c->regions_lock);
        e->read_only = read_only != 0;
        pthread_mutex_unlock(&c->regions_lock);
    }
    pthread_mutex_unlock(&c->lock);
    return rc;
}

int mxop_array_view(mxop_client_t *c, uint32_t region, uint64_t offset, int32_t dtype, int32_t ndim,
                    const int64_t *shape, mxop_array_t *out)
{
    if (c == NULL)
        return MXOP_EINVAL;
    pthread_mutex_lock(&c->lock);
    int rc;
    char why[256];
    uint64_t span, elems;

    if (out == NULL) {
        rc = mxop__fail(c, MXOP_EINVAL, "mxop_array_view: out is NULL");
        goto out;
    }
    memset(out, 0, sizeof *out);
    if (mxop_dtype_size(dtype) == 0) {
        rc = mxop__fail(c, MXOP_EINVAL, "mxop_array_view: unknown dtype %d", (int)dtype);
        goto out;
    }
    if (ndim < 0 || ndim > MXOP_MAX_DIMS || (ndim > 0 && shape == NULL)) {
        rc =
            mxop__fail(c, MXOP_EINVAL, "mxop_array_view: ndim %d %s", (int)ndim,
                       ndim > 0 && ndim <= MXOP_MAX_DIMS ? "with shape NULL" : "is outside [0, 8]");
        goto out;
    }
    why[0] = '\0';
    rc = mxop__desc_span(dtype, ndim, shape, NULL, &span, &elems, why, sizeof why);
    if (rc < 0) {
        rc = mxop__fail(c, MXOP_EINVAL, "mxop_array_view: %s", why);
        goto out;
    }
    mxop__region_t *e = mxop__region_find(c, region);
    if (e == NULL) {
        rc = mxop__fail(c, MXOP_EUNKNOWN_REGION, "mxop_array_view: no region %u in this session",
                        region);
        goto out;
    }
    why[0] = '\0';
    rc = mxop__desc_check_bounds(offset, span, mxop_dtype_size(dtype), e->size, why, sizeof why);
    if (rc < 0) {
        rc = mxop__fail(c, MXOP_EBOUNDS, "mxop_array_view: region %u: %s", region, why);
        goto out;
    }
    out->data = e->base != NULL ? (uint8_t *)e->base + offset : NULL;
    out->dtype = dtype;
    out->ndim = ndim;
    for (int32_t i = 0; i < ndim; i++)
        out->shape[i] = shape[i];
    out->region = region;
    out->offset = offset;
    out->nbytes = (size_t)span;
    out->req = MXOP_REQ_WRITE;
    rc = 0;
out:
    pthread_mutex_unlock(&c->lock);
    return rc;
}
