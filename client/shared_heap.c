/*
 * client/shared_heap.c - memory for a framework's allocator in mxop shared
 * memory, so that the tensors an engine already has go to a call by
 * reference instead of through the staging copy.
 *
 * Each allocation is a block of its own: one memfd, mapped here, of the
 * request rounded up to a size class.  A block is one region when a call
 * passes a tensor in it (client/invoke.c asks mxop__shared_resolve), so
 * a worker sees exactly the blocks its session's calls passed, never the
 * rest of the heap.
 *
 * The danger is reuse: a block a worker has seen must never come back
 * holding unrelated data.  So a block is in one of these states, and
 * block_freed is the one transition out of BLOCK_LIVE:
 *
 *   LIVE    handed out;
 *   CLEAN   freed, never registered with any session: any allocation may
 *           take it (the clean cache);
 *   WARM    freed, registered with one open session only: only that
 *           session's outputs may take it (mxop_shared_alloc_output);
 *   DOOMED  freed, registered with sessions, to be revoked: each session
 *           releases its region at its next safe point (a call, or an
 *           output allocation, on a thread using it), then it is unmapped.
 *
 * A block once registered (`tainted`) is never CLEAN again, even after
 * its sessions are gone: releasing a region asks the worker to unmap it,
 * but an op that copied the mapping during a call (mremap) would keep
 * it, and a closing session's worker dies some time after the close.  An
 * unmapped block's pages are nobody else's, whatever a worker kept.
 *
 * Cached bytes (CLEAN and WARM) are capped (MXOP_ALLOCATOR_CACHE_MB):
 * beyond it the oldest CLEAN block is unmapped, or the oldest WARM one
 * doomed.  A fork's child gets private copies (heap_atfork_child).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include "client/client_internal.h"
#include "client/shared_heap.h"

#ifndef MFD_ALLOW_SEALING
#define MFD_ALLOW_SEALING 0x0002U
#endif
#ifndef F_SEAL_FUTURE_WRITE
#define F_SEAL_FUTURE_WRITE 0x0010
#endif

#define PAGE ((size_t)4096)
#define DEFAULT_MIN_BYTES ((size_t)64 << 10)
#define DEFAULT_CACHE_BYTES ((size_t)256 << 20)

enum block_state {
    BLOCK_LIVE = 0,
    BLOCK_CLEAN = 1,
    BLOCK_WARM = 2,
    BLOCK_DOOMED = 3,
};

/* A session the block is registered with, and the block's region there. */
typedef struct expo {
    mxop_client_t *c;
    uint32_t region;
} expo_t;

typedef struct block {
    uint8_t *base;
    size_t size;
    int fd;      /* -1 in a forked child: the mapping is a private copy there, never shared */
    int state;   /* enum block_state */
    int tainted; /* registered with a session once: never CLEAN again */
    /* The one client it was ever registered with (its heap_id), or 0; `crossed`: more than one. */
    uint64_t only;
    int crossed;
    int sealed; /* seen sealed against writable mappings (by a scratch-mode session) */
    uint64_t serial;
    expo_t *ex;
    size_t nex, capex;
    struct block *next; /* on a list of blocks to unmap once the lock is dropped */
} block_t;

static struct {
    pthread_mutex_t lock;
    block_t **tab; /* every mapped block, by base address */
    size_t n, cap;
    block_t **cache; /* CLEAN and WARM blocks, oldest first */
    size_t ncache, capcache;
    uint64_t serial;
    uint64_t clients; /* heap_id of the last client that got one */
    uint64_t blocks_live, bytes_live, bytes_cached;
    uint64_t registrations, revocations, reused_warm;
} H = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* Blocks mapped (the hot path's test) and registrations of DOOMED blocks not yet revoked. */
static atomic_size_t n_mapped;
static atomic_size_t n_pending;

static pthread_once_t once = PTHREAD_ONCE_INIT;
static size_t min_bytes = DEFAULT_MIN_BYTES;
static size_t cache_cap = DEFAULT_CACHE_BYTES;

static void heap_atfork_prepare(void);
static void heap_atfork_parent(void);
static void heap_atfork_child(void);

static size_t env_size(const char *name, size_t unit, size_t dflt)
{
    const char *v = getenv(name);
    if (v == NULL || *v == '\0')
        return dflt;
    char *end;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    if (errno != 0 || *end != '\0' || x > SIZE_MAX / unit)
        return dflt;
    return (size_t)x * unit;
}

static void heap_init(void)
{
    min_bytes = env_size("MXOP_ALLOCATOR_MIN_KB", 1024, DEFAULT_MIN_BYTES);
    cache_cap = env_size("MXOP_ALLOCATOR_CACHE_MB", (size_t)1 << 20, DEFAULT_CACHE_BYTES);
    (void)pthread_atfork(heap_atfork_prepare, heap_atfork_parent, heap_atfork_child);
}

size_t mxop_shared_min_bytes(void)
{
    pthread_once(&once, heap_init);
    return min_bytes;
}

int mxop__shared_any(void)
{
    return atomic_load_explicit(&n_mapped, memory_order_relaxed) != 0;
}

/*
 * A request's size class: whole pages up to 64 KiB, then four classes
 * per power of two, so that a freed block fits the next request of about
 * its size (a framework frees and allocates the same shapes) while at
 * most a quarter of a block goes unused.  0 when it does not fit size_t.
 */
static size_t class_size(size_t bytes)
{
    if (bytes > SIZE_MAX / 2)
        return 0;
    if (bytes <= ((size_t)64 << 10))
        return (bytes + PAGE - 1) / PAGE * PAGE;
    int top = 63 - __builtin_clzll((unsigned long long)bytes);
    size_t step = (size_t)1 << (top - 2);
    return (bytes + step - 1) / step * step;
}

/* ---- the table of blocks (H.lock held) ---- */

/* The index of the block whose base is the greatest not above p, or -1. */
static long tab_floor(const void *p)
{
    size_t lo = 0, hi = H.n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if ((const uint8_t *)H.tab[mid]->base <= (const uint8_t *)p)
            lo = mid + 1;
        else
            hi = mid;
    }
    return (long)lo - 1;
}

/* The block containing p, or NULL. */
static block_t *tab_find(const void *p)
{
    long i = tab_floor(p);
    if (i < 0)
        return NULL;
    block_t *b = H.tab[i];
    return (const uint8_t *)p < b->base + b->size ? b : NULL;
}

static int tab_insert(block_t *b)
{
    if (H.n == H.cap) {
        size_t cap = H.cap ? 2 * H.cap : 64;
        block_t **t = realloc(H.tab, cap * sizeof *t);
        if (t == NULL)
            return -1;
        H.tab = t;
        H.cap = cap;
    }
    size_t i = (size_t)(tab_floor(b->base) + 1);
    memmove(&H.tab[i + 1], &H.tab[i], (H.n - i) * sizeof *H.tab);
    H.tab[i] = b;
    H.n++;
    atomic_store_explicit(&n_mapped, H.n, memory_order_relaxed);
    return 0;
}

static void tab_remove(block_t *b)
{
    long i = tab_floor(b->base);
    if (i < 0 || H.tab[i] != b)
        return;
    memmove(&H.tab[i], &H.tab[i + 1], (H.n - (size_t)i - 1) * sizeof *H.tab);
    H.n--;
    atomic_store_explicit(&n_mapped, H.n, memory_order_relaxed);
}

static int cache_push(block_t *b)
{
    if (H.ncache == H.capcache) {
        size_t cap = H.capcache ? 2 * H.capcache : 64;
        block_t **t = realloc(H.cache, cap * sizeof *t);
        if (t == NULL)
            return -1;
        H.cache = t;
        H.capcache = cap;
    }
    H.cache[H.ncache++] = b;
    H.bytes_cached += b->size;
    return 0;
}

static void cache_take(size_t i)
{
    H.bytes_cached -= H.cache[i]->size;
    memmove(&H.cache[i], &H.cache[i + 1], (H.ncache - i - 1) * sizeof *H.cache);
    H.ncache--;
}

static void cache_remove(block_t *b)
{
    for (size_t i = 0; i < H.ncache; i++)
        if (H.cache[i] == b) {
            cache_take(i);
            return;
        }
}

/* Takes b out of the table onto *grave, to be unmapped once the lock is dropped. */
static void bury(block_t *b, block_t **grave)
{
    tab_remove(b);
    b->next = *grave;
    *grave = b;
}

/* Unmaps and closes the blocks of a grave (H.lock not held: munmap of a big block takes time). */
static void grave_empty(block_t *grave)
{
    while (grave != NULL) {
        block_t *next = grave->next;
        munmap(grave->base, grave->size);
        if (grave->fd >= 0)
            close(grave->fd);
        free(grave->ex);
        free(grave);
        grave = next;
    }
}

/* WARM b (a cached block) becomes DOOMED: each session's registration is revoked at its next safe
 * point. */
static void doom(block_t *b)
{
    b->state = BLOCK_DOOMED;
    atomic_fetch_add_explicit(&n_pending, b->nex, memory_order_relaxed);
}

/* Keeps the cached bytes under the cap: the oldest block goes first. */
static void cache_trim(block_t **grave)
{
    while (H.bytes_cached > cache_cap && H.ncache > 0) {
        block_t *b = H.cache[0];
        cache_take(0);
        if (b->state == BLOCK_CLEAN)
            bury(b, grave);
        else
            doom(b);
    }
}

/* ---- making blocks ---- */

/*
 * One memfd of `size` bytes, mapped here.  MFD_ALLOW_SEALING and no
 * F_SEAL_SEAL: the daemon seals a region of a session in scratch mode
 * against new writable mappings (server/daemon/memconfine.c), which
 * leaves this mapping writable.  Shrinking is sealed (a mapping of a
 * shrunk file faults).  Pages come with their first touch, as malloc's
 * do.  Returns 0, or -1 with errno set.
 */
static int block_make(size_t size, block_t **out)
{
    block_t *b = calloc(1, sizeof *b);
    if (b == NULL)
        return -1;
    int fd = memfd_create("mxop-heap", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0)
        goto err_b;
    if (ftruncate(fd, (off_t)size) != 0 || fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) != 0)
        goto err_fd;
    void *base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED)
        goto err_fd;
    b->base = base;
    b->size = size;
    b->fd = fd;
    b->state = BLOCK_LIVE;
    *out = b;
    return 0;

err_fd : {
    int saved = errno;
    close(fd);
    errno = saved;
}
err_b : {
    int saved = errno;
    free(b);
    errno = saved;
}
    return -1;
}

/* Unmaps every CLEAN block (to make room for a new one).  Returns how many. */
static size_t drop_clean(void)
{
    block_t *grave = NULL;
    size_t n = 0;
    pthread_mutex_lock(&H.lock);
    for (size_t i = H.ncache; i-- > 0;) {
        block_t *b = H.cache[i];
        if (b->state == BLOCK_CLEAN) {
            cache_take(i);
            bury(b, &grave);
            n++;
        }
    }
    pthread_mutex_unlock(&H.lock);
    grave_empty(grave);
    return n;
}

/*
 * Each block holds a descriptor, so a heap of many tensors needs more
 * than the usual soft limit of 1024: it is raised to the hard limit the
 * first time a block cannot be made for want of one (docs/user-guide.md).
 */
static int raise_nofile(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur >= rl.rlim_max)
        return 0;
    rl.rlim_cur = rl.rlim_max;
    return setrlimit(RLIMIT_NOFILE, &rl) == 0;
}

static void *alloc_fresh(size_t size)
{
    block_t *b = NULL;
    int raised = 0, dropped = 0;
    while (block_make(size, &b) != 0) {
        int err = errno;
        if ((err == EMFILE || err == ENFILE || err == ENOMEM) && !dropped) {
            dropped = 1;
            if (drop_clean() > 0)
                continue;
        }
        if (err == EMFILE && !raised) {
            raised = 1;
            if (raise_nofile())
                continue;
        }
        errno = err;
        return NULL;
    }
    pthread_mutex_lock(&H.lock);
    b->serial = ++H.serial;
    int rc = tab_insert(b);
    if (rc == 0) {
        H.blocks_live++;
        H.bytes_live += b->size;
    }
    pthread_mutex_unlock(&H.lock);
    if (rc != 0) {
        b->next = NULL;
        grave_empty(b);
        errno = ENOMEM;
        return NULL;
    }
    return b->base;
}

/* Cached block i becomes LIVE (H.lock held). */
static void *revive(size_t i)
{
    block_t *b = H.cache[i];
    cache_take(i);
    b->state = BLOCK_LIVE;
    H.blocks_live++;
    H.bytes_live += b->size;
    return b->base;
}

/* ---- the public API ---- */

void *mxop_shared_alloc(size_t bytes)
{
    pthread_once(&once, heap_init);
    size_t size = class_size(bytes);
    if (bytes == 0 || size == 0) {
        errno = bytes == 0 ? EINVAL : ENOMEM;
        return NULL;
    }
    pthread_mutex_lock(&H.lock);
    /* The most recently freed clean block of the class: its pages are likeliest in cache. */
    for (size_t i = H.ncache; i-- > 0;) {
        const block_t *b = H.cache[i];
        if (b->state == BLOCK_CLEAN && b->size == size) {
            void *p = revive(i);
            pthread_mutex_unlock(&H.lock);
            return p;
        }
    }
    pthread_mutex_unlock(&H.lock);
    return alloc_fresh(size);
}

void *mxop_shared_alloc_output(mxop_client_t *c, size_t bytes)
{
    pthread_once(&once, heap_init);
    size_t size = class_size(bytes);
    if (bytes == 0 || size == 0) {
        errno = bytes == 0 ? EINVAL : ENOMEM;
        return NULL;
    }
    if (c == NULL)
        return mxop_shared_alloc(bytes);
    /* A safe point of c, unless another thread's call holds it (then its call is one). */
    if (atomic_load_explicit(&n_pending, memory_order_relaxed) != 0 &&
        pthread_mutex_trylock(&c->lock) == 0) {
        mxop__shared_revoke(c);
        pthread_mutex_unlock(&c->lock);
    }
    pthread_mutex_lock(&H.lock);
    for (size_t i = H.ncache; i-- > 0;) {
        const block_t *b = H.cache[i];
        if (b->state == BLOCK_WARM && b->size == size && b->nex == 1 && b->ex[0].c == c) {
            void *p = revive(i);
            H.reused_warm++;
            pthread_mutex_unlock(&H.lock);
            return p;
        }
    }
    pthread_mutex_unlock(&H.lock);
    return mxop_shared_alloc(bytes);
}

/* The transition out of BLOCK_LIVE (H.lock held); b goes to *grave when nobody may reuse it. */
static void block_freed(block_t *b, block_t **grave)
{
    H.blocks_live--;
    H.bytes_live -= b->size;
    if (b->fd < 0 || (b->nex == 0 && b->tainted)) {
        bury(b, grave); /* a forked child's private copy, or seen by a session now gone */
        return;
    }
    if (b->nex > 1) {
        doom(b);
        return;
    }
    b->state = b->nex == 0 ? BLOCK_CLEAN : BLOCK_WARM;
    if (cache_push(b) != 0) {
        if (b->nex == 0)
            bury(b, grave);
        else
            doom(b);
        return;
    }
    cache_trim(grave);
}

int mxop_shared_free(void *p)
{
    if (p == NULL)
        return 0;
    block_t *grave = NULL;
    pthread_mutex_lock(&H.lock);
    block_t *b = tab_find(p);
    if (b == NULL || b->base != p || b->state != BLOCK_LIVE) {
        pthread_mutex_unlock(&H.lock);
        return MXOP_EINVAL;
    }
    block_freed(b, &grave);
    pthread_mutex_unlock(&H.lock);
    grave_empty(grave);
    return 0;
}

int mxop_shared_contains(const void *p, size_t n)
{
    if (p == NULL || !mxop__shared_any())
        return 0;
    pthread_mutex_lock(&H.lock);
    const block_t *b = tab_find(p);
    int in = b != NULL && b->state == BLOCK_LIVE &&
             n <= b->size - (size_t)((const uint8_t *)p - b->base);
    pthread_mutex_unlock(&H.lock);
    return in;
}

void mxop_shared_stats(mxop_shared_stats_t *st)
{
    if (st == NULL)
        return;
    pthread_mutex_lock(&H.lock);
    st->blocks_live = H.blocks_live;
    st->bytes_live = H.bytes_live;
    st->blocks_cached = H.ncache;
    st->bytes_cached = H.bytes_cached;
    st->registrations = H.registrations;
    st->revocations = H.revocations;
    st->reused_warm = H.reused_warm;
    pthread_mutex_unlock(&H.lock);
}

/* ---- sessions ---- */

static long expo_of(const block_t *b, const mxop_client_t *c)
{
    for (size_t k = 0; k < b->nex; k++)
        if (b->ex[k].c == c)
            return (long)k;
    return -1;
}

static void expo_drop(block_t *b, size_t k)
{
    b->ex[k] = b->ex[b->nex - 1];
    b->nex--;
}

/* Dooms every WARM block of c (to free its regions).  Returns how many. */
static size_t doom_warm(const mxop_client_t *c)
{
    size_t n = 0;
    pthread_mutex_lock(&H.lock);
    for (size_t i = H.ncache; i-- > 0;) {
        block_t *b = H.cache[i];
        if (b->state == BLOCK_WARM && b->nex == 1 && b->ex[0].c == c) {
            cache_take(i);
            doom(b);
            n++;
        }
    }
    pthread_mutex_unlock(&H.lock);
    return n;
}

/*
 * Whether the call of c may write b in place (H.lock held).  A session in
 * scratch mode has the daemon seal the memfds it holds against new
 * writable mappings, for good; a zero-copy session's worker then cannot
 * map the block writable (and its call would fail), so such a block is
 * staged when written.  Only a block another session held can be sealed
 * under a session not in scratch mode (scratch mode is for good too): the
 * seals are read for those only.
 */
static int writable_for(block_t *b, const mxop_client_t *c)
{
    if (c->confined || (!b->crossed && (b->only == 0 || b->only == c->heap_id)))
        return 1;
    if (!b->sealed) {
        int seals = fcntl(b->fd, F_GET_SEALS);
        b->sealed = seals > 0 && (seals & (F_SEAL_FUTURE_WRITE | F_SEAL_WRITE)) != 0;
    }
    return !b->sealed;
}

int mxop__shared_resolve(mxop_client_t *c, const void *p, uint64_t n, int write, uint32_t *region,
                         uint64_t *offset)
{
    pthread_mutex_lock(&H.lock);
    block_t *b = tab_find(p);
    uint64_t off = b != NULL ? (uint64_t)((const uint8_t *)p - b->base) : 0;
    if (b == NULL || b->state != BLOCK_LIVE || b->fd < 0 || n > b->size - off ||
        (write && !writable_for(b, c))) {
        pthread_mutex_unlock(&H.lock);
        return 0;
    }
    long k = expo_of(b, c);
    if (k >= 0) {
        *region = b->ex[k].region;
        *offset = off;
        pthread_mutex_unlock(&H.lock);
        return 1;
    }
    int fd = b->fd;
    void *base = b->base;
    size_t size = b->size;
    uint64_t serial = b->serial;
    pthread_mutex_unlock(&H.lock);

    /* The round trip runs without the heap's lock: frees on other threads go on meanwhile. */
    uint32_t id;
    int rc = mxop__region_add_block(c, fd, base, size, &id);
    /* The session holds as many regions as the daemon allows: its warm blocks make room. */
    if (rc == MXOP_ELIMIT && doom_warm(c) > 0) {
        mxop__shared_revoke(c);
        rc = mxop__region_add_block(c, fd, base, size, &id);
    }
    if (rc == MXOP_ELIMIT)
        return 0; /* staged, as any heap array: the call does not fail for want of a region */
    if (rc < 0)
        return rc;
    pthread_mutex_lock(&H.lock);
    b = tab_find(base);
    if (b == NULL || b->serial != serial || b->state != BLOCK_LIVE) {
        pthread_mutex_unlock(&H.lock);
        (void)mxop__region_drop(c, id);
        return mxop__fail(c, MXOP_EINVAL,
                          "a tensor's shared-heap block was freed (mxop_shared_free) while a call "
                          "used it");
    }
    if (b->nex == b->capex) {
        size_t cap = b->capex ? 2 * b->capex : 2;
        expo_t *ex = realloc(b->ex, cap * sizeof *ex);
        if (ex == NULL) {
            pthread_mutex_unlock(&H.lock);
            (void)mxop__region_drop(c, id);
            return mxop__fail(c, MXOP_ENOMEM, "out of memory noting a shared-heap registration");
        }
        b->ex = ex;
        b->capex = cap;
    }
    b->ex[b->nex++] = (expo_t){.c = c, .region = id};
    b->tainted = 1;
    if (c->heap_id == 0)
        c->heap_id = ++H.clients;
    if (b->only == 0)
        b->only = c->heap_id;
    else if (b->only != c->heap_id)
        b->crossed = 1;
    H.registrations++;
    pthread_mutex_unlock(&H.lock);
    *region = id;
    *offset = off;
    return 1;
}

#define REVOKE_BATCH 32

void mxop__shared_revoke(mxop_client_t *c)
{
    while (atomic_load_explicit(&n_pending, memory_order_relaxed) != 0) {
        block_t *bs[REVOKE_BATCH];
        uint32_t ids[REVOKE_BATCH];
        size_t n = 0;
        pthread_mutex_lock(&H.lock);
        for (size_t i = 0; i < H.n && n < REVOKE_BATCH; i++) {
            block_t *b = H.tab[i];
            long k = b->state == BLOCK_DOOMED ? expo_of(b, c) : -1;
            if (k >= 0) {
                bs[n] = b;
                ids[n++] = b->ex[k].region;
            }
        }
        pthread_mutex_unlock(&H.lock);
        if (n == 0)
            return;
        /* A DOOMED block stays mapped while c's registration is noted in it: bs[] stay valid. */
        for (size_t i = 0; i < n; i++)
            if (mxop__region_drop(c, ids[i]) < 0)
                mxop__region_forget(c, ids[i]); /* the block is unmapped below all the same */
        block_t *grave = NULL;
        pthread_mutex_lock(&H.lock);
        for (size_t i = 0; i < n; i++) {
            long k = expo_of(bs[i], c);
            if (k < 0)
                continue;
            expo_drop(bs[i], (size_t)k);
            atomic_fetch_sub_explicit(&n_pending, 1, memory_order_relaxed);
            H.revocations++;
            if (bs[i]->nex == 0)
                bury(bs[i], &grave);
        }
        pthread_mutex_unlock(&H.lock);
        grave_empty(grave);
    }
}

void mxop__shared_forget(mxop_client_t *c)
{
    if (!mxop__shared_any())
        return;
    block_t *grave = NULL;
    pthread_mutex_lock(&H.lock);
    for (size_t i = H.n; i-- > 0;) {
        block_t *b = H.tab[i];
        long k = expo_of(b, c);
        if (k < 0)
            continue;
        expo_drop(b, (size_t)k);
        if (b->state == BLOCK_DOOMED)
            atomic_fetch_sub_explicit(&n_pending, 1, memory_order_relaxed);
        if (b->nex == 0 && (b->state == BLOCK_WARM || b->state == BLOCK_DOOMED)) {
            if (b->state == BLOCK_WARM)
                cache_remove(b);
            bury(b, &grave);
        }
    }
    pthread_mutex_unlock(&H.lock);
    grave_empty(grave);
}

/* ---- fork ---- */

static void heap_atfork_prepare(void)
{
    pthread_mutex_lock(&H.lock);
}

static void heap_atfork_parent(void)
{
    pthread_mutex_unlock(&H.lock);
}

/*
 * Makes b's mapping in a forked child a private copy at the same address:
 * the child's stores never reach the parent's memory (or a worker's).
 * Pages the child has not written show the file, so the parent's later
 * stores too.  Without a mapping of the file, a copy made by hand.
 */
static void make_private(block_t *b)
{
    void *p = mmap(b->base, b->size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_FIXED, b->fd, 0);
    if (p != MAP_FAILED)
        return;
    void *copy = mmap(NULL, b->size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (copy == MAP_FAILED)
        return; /* left shared: nothing better is possible without memory */
    memcpy(copy, b->base, b->size);
    if (mremap(copy, b->size, b->size, MREMAP_MAYMOVE | MREMAP_FIXED, b->base) == MAP_FAILED)
        munmap(copy, b->size);
}

/*
 * In a forked child: live blocks become private copies (their
 * descriptors closed: a copy is never passed by reference, calls stage
 * it), cached and doomed blocks are unmapped, registrations (the
 * parent's sessions) forgotten.  Blocks the child makes are its own.
 */
static void heap_atfork_child(void)
{
    size_t kept = 0;
    for (size_t i = 0; i < H.n; i++) {
        block_t *b = H.tab[i];
        b->nex = 0;
        if (b->state == BLOCK_LIVE) {
            if (b->fd >= 0) {
                make_private(b);
                close(b->fd);
                b->fd = -1;
            }
            H.tab[kept++] = b;
        } else {
            munmap(b->base, b->size);
            if (b->fd >= 0)
                close(b->fd);
            free(b->ex);
            free(b);
        }
    }
    H.n = kept;
    H.ncache = 0;
    H.bytes_cached = 0;
    atomic_store_explicit(&n_mapped, H.n, memory_order_relaxed);
    atomic_store_explicit(&n_pending, 0, memory_order_relaxed);
    pthread_mutex_unlock(&H.lock);
}
