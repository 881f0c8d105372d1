/*
 * server/worker/regions.c - the session's mapped regions, by id.
 *
 * Every descriptor of every call is looked up here, so lookup is a probe
 * of an open-addressed table (linear probing, at most half full) with no
 * syscall and no allocation.  Removal shifts the following entries back,
 * so the table needs no tombstones.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/util.h"
#include "shm/region.h"
#include "server/worker/cuda.h"
#include "server/worker/prefill.h"
#include "server/worker/worker.h"

static mxop__region_t *slots;
static uint32_t cap; /* a power of two, or 0 */
static uint32_t count;
/* Scratch mode (mxop__regions_confine): no writable view of engine regions from now on. */
static int confined;

/*
 * The read-only view of a region comes from a read-only file description:
 * the region's descriptor reopened through /proc/self/fd with O_RDONLY.
 * A shared mapping of a read-only description can never be made writable
 * (mprotect and a new mmap with PROT_WRITE fail with EACCES), so an op
 * cannot turn its input's view writable.  Where the reopen is refused (a
 * region backed by a file outside what the sandbox lets the worker open),
 * the view is mapped from the region's own descriptor as before: the
 * store is still caught, an mprotect is not (docs/security.md).
 */
static int map_read_only(int fd, size_t size, void **ro)
{
    char path[48];
    snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
    int rfd = open(path, O_RDONLY | O_CLOEXEC);
    if (rfd < 0)
        return mxop__region_map(fd, size, 0, ro);
    int rc = mxop__region_map(rfd, size, 0, ro);
    close(rfd);
    return rc;
}

/* A read-only region's descriptor (a read-only reopen): a file that holds `size` bytes. */
static int check_ro_fd(int fd, uint64_t size, char *why, size_t whylen)
{
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        mxop__fmt(why, whylen, "region fd is not a memfd or shared memory file");
        return -1;
    }
    if ((uint64_t)st.st_size < size) {
        mxop__fmt(why, whylen, "region fd holds %lld bytes, fewer than the %llu declared",
                  (long long)st.st_size, (unsigned long long)size);
        return -1;
    }
    return 0;
}

static inline uint32_t hash(uint32_t id)
{
    /* Ids are small consecutive numbers; a multiplicative hash spreads them. */
    return (id * 2654435761u) & (cap - 1);
}

const mxop__region_t *mxop__region_find(uint32_t id)
{
    if (cap == 0 || id == 0)
        return NULL;
    for (uint32_t i = hash(id);; i = (i + 1) & (cap - 1)) {
        if (slots[i].id == id)
            return &slots[i];
        if (slots[i].id == 0)
            return NULL;
    }
}

static void insert(mxop__region_t *tab, uint32_t tcap, const mxop__region_t *r)
{
    uint32_t i = (r->id * 2654435761u) & (tcap - 1);
    while (tab[i].id != 0)
        i = (i + 1) & (tcap - 1);
    tab[i] = *r;
}

static int grow(void)
{
    if (cap != 0 && (count + 1) * 2 <= cap)
        return 0;
    uint32_t ncap = cap ? cap * 2 : 16;
    if (ncap == 0)
        return MXOP_ENOMEM;
    mxop__region_t *tab = calloc(ncap, sizeof(*tab));
    if (tab == NULL)
        return MXOP_ENOMEM;
    for (uint32_t i = 0; i < cap; i++)
        if (slots[i].id != 0)
            insert(tab, ncap, &slots[i]);
    free(slots);
    slots = tab;
    cap = ncap;
    return 0;
}

int mxop__region_add(uint32_t id, uint64_t size, int fd, char *msg, size_t msglen)
{
    return mxop__region_add_flags(id, size, fd, 0, 0, msg, msglen);
}

void mxop__regions_confine(void)
{
    confined = 1;
    for (uint32_t i = 0; i < cap; i++) {
        mxop__region_t *r = &slots[i];
        if (r->id == 0 || r->cuda || r->scratch || r->rw == NULL)
            continue;
        mxop__prefill_cancel(r->rw);
        mxop__region_unmap(r->rw, r->size);
        r->rw = NULL;
    }
}

int mxop__region_add_flags(uint32_t id, uint64_t size, int fd, unsigned flags,
                           uint64_t reserved_from, char *msg, size_t msglen)
{
    int scratch = (flags & MXOP__MAP_SCRATCH) != 0;
    int writable = scratch || (!confined && !(flags & MXOP__MAP_READ_ONLY));
    if (id == 0) {
        mxop__fmt(msg, msglen, "region id 0 is reserved (it never names a region)");
        return MXOP_EINVAL;
    }
    if (size == 0 || size > SIZE_MAX / 2) {
        mxop__fmt(msg, msglen, "region %u: size %llu is not a mappable size", id,
                  (unsigned long long)size);
        return MXOP_EINVAL;
    }
    if (mxop__region_find(id) != NULL) {
        mxop__fmt(msg, msglen, "region %u is already mapped", id);
        return MXOP_EINVAL;
    }
    /* A file shorter than the region would SIGBUS on the first touch: refuse it now. */
    char why[256];
    if (writable ? mxop__region_check_fd(fd, size, why, sizeof(why)) != 0
                 : check_ro_fd(fd, size, why, sizeof(why)) != 0) {
        mxop__fmt(msg, msglen, "region %u: %s", id, why);
        return MXOP_ESHM;
    }
    if (grow() != 0) {
        mxop__fmt(msg, msglen, "region %u: out of memory for the region table", id);
        return MXOP_ENOMEM;
    }

    void *ro = NULL, *rw = NULL;
    if (map_read_only(fd, (size_t)size, &ro) != 0) {
        mxop__fmt(msg, msglen, "region %u: cannot map %llu bytes read-only", id,
                  (unsigned long long)size);
        return MXOP_ESHM;
    }
    if (writable && mxop__region_map(fd, (size_t)size, 1, &rw) != 0) {
        /*
         * A memory sealed against new writable mappings (its session went to
         * scratch mode while this request was on its way, or the engine
         * registered sealed memory): the worker holds it read-only, and an
         * output into it is refused by name (checks.c).  Only the scratch
         * region must be writable.
         */
        if (!scratch && errno == EPERM) {
            rw = NULL;
        } else {
            mxop__fmt(msg, msglen, "region %u: cannot map %llu bytes read-write", id,
                      (unsigned long long)size);
            goto err_ro;
        }
    }
    /*
     * The heads now; the rest of the writable view in the background
     * (prefill.c).  Not a head the client is still reserving: a fault there
     * would allocate the page here, in the worker's cgroup, before the
     * engine's reservation.
     */
    if (reserved_from > size)
        reserved_from = size;
    if (reserved_from == 0) {
        mxop__region_prefault(ro, (size_t)size, 0);
        if (rw != NULL)
            mxop__region_prefault(rw, (size_t)size, 1);
    }
    struct stat st;
    if (rw != NULL)
        mxop__prefill_start(rw, (size_t)size, (size_t)reserved_from,
                            fstat(fd, &st) == 0 ? (uint64_t)st.st_ino : 0);

    mxop__region_t r = {.id = id,
                        .ro = ro,
                        .rw = rw,
                        .size = (size_t)size,
                        .cuda = 0,
                        .device = -1,
                        .scratch = scratch};
    insert(slots, cap, &r);
    count++;
    return 0;

err_ro:
    mxop__region_unmap(ro, (size_t)size);
    return MXOP_ESHM;
}

int mxop__region_add_cuda(uint32_t id, uint64_t size, int32_t device, const uint8_t *handle,
                          size_t len, char *msg, size_t msglen)
{
    if (id == 0) {
        mxop__fmt(msg, msglen, "region id 0 is reserved (it never names a region)");
        return MXOP_EINVAL;
    }
    if (size == 0 || size > SIZE_MAX / 2) {
        mxop__fmt(msg, msglen, "device region %u: size %llu is not a valid size", id,
                  (unsigned long long)size);
        return MXOP_EINVAL;
    }
    if (mxop__region_find(id) != NULL) {
        mxop__fmt(msg, msglen, "region %u is already mapped", id);
        return MXOP_EINVAL;
    }
    if (grow() != 0) {
        mxop__fmt(msg, msglen, "region %u: out of memory for the region table", id);
        return MXOP_ENOMEM;
    }
    char why[MXOP__W_MSG_MAX - 64];
    void *p = NULL;
    int rc = mxop__cuda_open_ipc(device, handle, len, size, &p, why, sizeof(why));
    if (rc != 0) {
        /* The no-device sentence reads best on its own: it starts the message. */
        if (rc == MXOP_ENO_DEVICE)
            mxop__fmt(msg, msglen, "%s (device region %u)", why, id);
        else
            mxop__fmt(msg, msglen, "device region %u: %s", id, why);
        return rc;
    }
    /* One pointer serves as both "mappings": GPU memory has no read-only view. */
    mxop__region_t r = {
        .id = id, .ro = p, .rw = p, .size = (size_t)size, .cuda = 1, .device = device};
    insert(slots, cap, &r);
    count++;
    return 0;
}

int mxop__region_remove(uint32_t id, char *msg, size_t msglen)
{
    mxop__region_t *r = (mxop__region_t *)mxop__region_find(id);
    if (r == NULL) {
        mxop__fmt(msg, msglen, "region %u is not registered", id);
        return MXOP_EUNKNOWN_REGION;
    }
    if (r->cuda) {
        mxop__cuda_close_ipc(r->device, r->rw);
    } else {
        mxop__region_unmap(r->ro, r->size);
        if (r->rw != NULL) {
            mxop__prefill_cancel(r->rw);
            mxop__region_unmap(r->rw, r->size);
        }
    }

    /* Backward-shift deletion: pull later members of the probe run into the hole. */
    uint32_t hole = (uint32_t)(r - slots);
    slots[hole].id = 0;
    for (uint32_t j = (hole + 1) & (cap - 1); slots[j].id != 0; j = (j + 1) & (cap - 1)) {
        uint32_t home = hash(slots[j].id);
        /* Does home lie cyclically in (hole, j]?  Then the entry stays. */
        int stays = hole <= j ? (home > hole && home <= j) : (home > hole || home <= j);
        if (!stays) {
            slots[hole] = slots[j];
            slots[j].id = 0;
            hole = j;
        }
    }
    count--;
    return 0;
}
