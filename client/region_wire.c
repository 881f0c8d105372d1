/*
 * client/region_wire.c - a region's registration with the daemon
 * (RegisterRegion with its descriptor, ReleaseRegion), and every region of
 * the table registered again after a reconnection.
 *
 * It sits below both regions.c (which reconnects a daemon that went away
 * before it registers) and reconnect.c (which registers the regions again
 * on the new daemon): it never reconnects itself.
 */
#include <errno.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/stat.h>

#include "client/client_internal.h"
#include "shm/region.h"

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
int mxop__region_register(mxop_client_t *c, int fd, size_t bytes, int scratch, size_t reserve_from,
                          uint32_t *id)
{
    int rc;
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
        (void)mxop__region_release_id(c, *id);
        return mxop__fail(c, MXOP_ESHM,
                          "cannot reserve the first %zu of the %zu bytes of a shared memory "
                          "region: %s",
                          reserve_from, bytes, strerror(reserve_errno));
    }
    return 0;
}

int mxop__region_release_id(mxop_client_t *c, uint32_t id)
{
    Mxop__ReleaseRegion body = MXOP__RELEASE_REGION__INIT;
    body.region = id;
    Mxop__Request req = MXOP__REQUEST__INIT;
    req.body_case = MXOP__REQUEST__BODY_RELEASE_REGION;
    req.release_region = &body;
    Mxop__Reply *r;
    return mxop__ctl_request(c, &req, NULL, 0, mxop__ctl_timeout(c), &r, NULL);
}

int mxop__regions_reregister(mxop_client_t *c)
{
    for (size_t i = 0; i < c->nregions; i++) {
        mxop__region_t *e = &c->regions[i];
        if (e->fd < 0)
            continue; /* a device region, or a borrowed fd not kept: calls name it unknown */
        uint32_t wire;
        int rc = mxop__region_register(c, e->fd, e->size, e->kind == MXOP__REGION_STAGE, 0, &wire);
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
