/*
 * server/worker/prefill.c - see prefill.h.
 *
 * Why in the background, from the end, and claimed by the calls.  A fresh
 * 64 MiB region costs the worker a page fault per page on its first write
 * through the writable view (about 27 ms here, 1.7x what the engine pays
 * for a fresh buffer of its own: `make bench` section 4).  Faulting all of
 * it in before the map is answered (MADV_POPULATE_WRITE, 17 ms) would
 * make the registration that much slower for every use, an input
 * included, which needs only the read-only view.  So the answer goes
 * first, and a thread of the worker faults the view in afterwards, 2 MiB
 * at a time from the end.  A call whose output lies in a view not yet done
 * faults in the chunks under its outputs first, from the head, the same
 * way (mxop__prefill_claim): populating costs about 1 us a page, a write
 * fault 1.7 us.  The two meet half way; an input's first call runs beside
 * the thread on the other CPU (the client sleeps through a call that
 * long).
 *
 * A client reserves the lower part of a large region while its
 * registration is on its way (shm/region.h, mxop__region_split), and says
 * so (reserved_from).  Faulting a page in before the client reserved it
 * would allocate it here, charged to the worker's cgroup, so the chunks
 * that reach below reserved_from wait until the client's progress words in
 * the mailbox (shm/mailbox.h) say they are reserved, or until a call claims
 * a span of the view: the call comes after the registration returned, and
 * that is after the reservation.  So the thread, on the other CPU, faults
 * in each part soon after the client reserved it, while the client
 * reserves the next; it looks at the words every FOLLOW_POLL_NS while a
 * view waits, for at most FOLLOW_NS.
 *
 * One thread for the worker's lifetime, started at the first large
 * region, sleeping on a condition variable when there is nothing to do.
 * Each job is a view with a map of its chunks (pending, taken); the lock
 * is held only to take a chunk, never while populating.
 * mxop__prefill_cancel waits until no chunk of the view is being
 * populated before its caller unmaps it.
 */
#include "server/worker/prefill.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/mman.h>
#include <time.h>

#include "common/util.h"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

/*
 * While a view waits for its client's reservation, the thread looks at the
 * client's progress words this often, for at most FOLLOW_NS after the map:
 * a registration that does not finish in that time (it failed, or the
 * session is on the socket path and says nothing) leaves the rest to the
 * first call's claim, and an idle worker burns nothing.
 */
#define FOLLOW_POLL_NS (200 * 1000)
#define FOLLOW_NS ((int64_t)2000 * 1000 * 1000)

/* A chunk is the head mxop__region_prefault faults in, so chunk 0 is done at the start when
 * the client had reserved the whole region (reserved_from 0). */
#define CHUNK MXOP__PREFILL_MIN
#define JOBS 16
#define CHUNKS (MXOP__PREFILL_MAX / CHUNK)

typedef struct job {
    uint8_t *base;
    size_t size;             /* bytes to fault in (at most MXOP__PREFILL_MAX) */
    uint32_t n_chunks, left; /* chunks in all, and not yet taken */
    uint32_t busy;           /* chunks being populated now, outside the lock */
    uint32_t held;         /* chunks [0, held) wait for a claim: the client may be reserving them */
    uint64_t ino;          /* the memfd's inode number, as the client's progress words name it */
    int64_t follow_until;  /* CLOCK_MONOTONIC ns: the progress words are looked at until then */
    uint8_t taken[CHUNKS]; /* 1: populated or being populated (chunk 0: the head) */
} job_t;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t work = PTHREAD_COND_INITIALIZER;
static pthread_cond_t chunk_over = PTHREAD_COND_INITIALIZER;
static job_t jobs[JOBS]; /* jobs[0 .. n_jobs): oldest first */
static int n_jobs;
static _Atomic int any_jobs; /* n_jobs != 0, read without the lock by every call */
static int started, start_failed;
/* The client's progress words (mxop__prefill_watch), read under the lock only; or NULL. */
static const _Atomic uint64_t *watch_ino, *watch_from;

static void drop_job(int i)
{
    for (int k = i + 1; k < n_jobs; k++)
        jobs[k - 1] = jobs[k];
    n_jobs--;
    atomic_store_explicit(&any_jobs, n_jobs != 0, memory_order_relaxed);
}

static job_t *find_job(const uint8_t *base)
{
    for (int i = 0; i < n_jobs; i++)
        if (jobs[i].base == base)
            return &jobs[i];
    return NULL;
}

/* Populates chunk k of j outside the lock (held on entry and on return). */
static void populate(job_t *j, uint32_t k)
{
    uint8_t *base = j->base;
    size_t off = (size_t)k * CHUNK, len = j->size - off < CHUNK ? j->size - off : CHUNK;
    j->taken[k] = 1;
    j->left--;
    j->busy++;
    pthread_mutex_unlock(&lock);
    /* An error (memory short) leaves those pages to their first use. */
    (void)madvise(base + off, len, MADV_POPULATE_WRITE);
    pthread_mutex_lock(&lock);
    /* The job may have moved in the table meanwhile (a drop before it): find it again. */
    job_t *now = find_job(base);
    if (now != NULL) {
        now->busy--;
        if (now->left == 0 && now->busy == 0)
            drop_job((int)(now - jobs));
    }
    pthread_cond_broadcast(&chunk_over);
}

/* The highest chunk of j the background may take now, or UINT32_MAX for none. */
static uint32_t next_chunk(const job_t *j)
{
    uint32_t k = j->n_chunks;
    while (k > j->held && j->taken[k - 1])
        k--;
    return k > j->held ? k - 1 : UINT32_MAX;
}

/*
 * Lets go of the held chunks the client's progress words say are reserved
 * now.  Returns 1 while a held view may still see progress (look again
 * soon), else 0.
 */
static int follow_progress(void)
{
    if (watch_ino == NULL)
        return 0;
    uint64_t ino = atomic_load_explicit(watch_ino, memory_order_acquire);
    uint64_t from = atomic_load_explicit(watch_from, memory_order_acquire);
    int64_t now = mxop__now_ns();
    int again = 0;
    for (int i = 0; i < n_jobs; i++) {
        job_t *j = &jobs[i];
        if (j->held == 0 || now > j->follow_until)
            continue;
        if (ino == j->ino) {
            uint64_t h = (from + CHUNK - 1) / CHUNK;
            if (h < j->held)
                j->held = (uint32_t)h;
        }
        again |= j->held > 0;
    }
    return again;
}

/* Sleeps until there is work, or at most FOLLOW_POLL_NS while following a client's progress. */
static void wait_for_work(int following)
{
    if (!following) {
        pthread_cond_wait(&work, &lock);
        return;
    }
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t); /* the condition variable's clock */
    t.tv_nsec += FOLLOW_POLL_NS;
    if (t.tv_nsec >= 1000000000) {
        t.tv_sec++;
        t.tv_nsec -= 1000000000;
    }
    pthread_cond_timedwait(&work, &lock, &t);
}

static void *prefill_main(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&lock);
    for (;;) {
        int following = follow_progress();
        /* The newest view with a chunk it may take, its highest such chunk. */
        job_t *j = NULL;
        uint32_t k = UINT32_MAX;
        for (int i = n_jobs - 1; i >= 0 && j == NULL; i--)
            if (jobs[i].left > 0 && (k = next_chunk(&jobs[i])) != UINT32_MAX)
                j = &jobs[i];
        if (j == NULL) {
            wait_for_work(following);
            continue;
        }
        populate(j, k);
    }
    return NULL;
}

void mxop__prefill_watch(const _Atomic uint64_t *ino, const _Atomic uint64_t *from)
{
    pthread_mutex_lock(&lock);
    watch_ino = ino != NULL && from != NULL ? ino : NULL;
    watch_from = watch_ino != NULL ? from : NULL;
    pthread_mutex_unlock(&lock);
}

static int ensure_thread(void)
{
    if (started)
        return 0;
    if (start_failed)
        return -1;
    pthread_t t;
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&a, 64 * 1024);
    int rc = pthread_create(&t, &a, prefill_main, NULL);
    pthread_attr_destroy(&a);
    if (rc != 0) {
        start_failed = 1;
        return -1;
    }
    started = 1;
    return 0;
}

void mxop__prefill_start(void *rw, size_t size, size_t reserved_from, uint64_t ino)
{
    if (rw == NULL || size <= MXOP__PREFILL_MIN)
        return;
    if (size > MXOP__PREFILL_MAX)
        size = MXOP__PREFILL_MAX;
    pthread_mutex_lock(&lock);
    if (ensure_thread() == 0) {
        /* A full table gives up its oldest idle job: those pages fault on their first use. */
        for (int i = 0; n_jobs == JOBS && i < n_jobs; i++)
            if (jobs[i].busy == 0)
                drop_job(i);
        if (n_jobs < JOBS) {
            job_t *j = &jobs[n_jobs++];
            j->base = rw;
            j->size = size;
            j->n_chunks = (uint32_t)((size + CHUNK - 1) / CHUNK);
            j->busy = 0;
            for (uint32_t k = 0; k < j->n_chunks; k++)
                j->taken[k] = 0;
            /* With all reserved, the head was faulted in with the answer (mxop__region_prefault).
             */
            j->taken[0] = reserved_from == 0;
            j->left = j->n_chunks - j->taken[0];
            /* Else every chunk that begins below reserved_from waits for a claim. */
            size_t held = (reserved_from + CHUNK - 1) / CHUNK;
            j->held = held < j->n_chunks ? (uint32_t)held : j->n_chunks;
            /* ... or until the client's progress words say they are reserved. */
            j->ino = ino;
            j->follow_until = mxop__now_ns() + FOLLOW_NS;
            atomic_store_explicit(&any_jobs, 1, memory_order_relaxed);
            pthread_cond_signal(&work);
        }
    }
    pthread_mutex_unlock(&lock);
}

void mxop__prefill_claim(void *rw, size_t off, size_t len)
{
    if (!atomic_load_explicit(&any_jobs, memory_order_relaxed) || rw == NULL || len == 0)
        return;
    pthread_mutex_lock(&lock);
    job_t *j = find_job(rw);
    if (j != NULL && j->held > 0) {
        /* A call: the client's registration, and so its reservation, is over. */
        j->held = 0;
        pthread_cond_signal(&work);
    }
    /* populate() lets go of the lock, and the job may move meanwhile: look it up again. */
    for (; j != NULL && j->left > 0 && off < j->size; j = find_job(rw)) {
        size_t end = off + len < j->size ? off + len : j->size;
        uint32_t k = (uint32_t)(off / CHUNK), last = (uint32_t)((end - 1) / CHUNK);
        while (k <= last && j->taken[k])
            k++;
        if (k > last)
            break;
        populate(j, k);
    }
    pthread_mutex_unlock(&lock);
}

void mxop__prefill_cancel(void *rw)
{
    if (rw == NULL)
        return;
    pthread_mutex_lock(&lock);
    job_t *j;
    while ((j = find_job(rw)) != NULL) {
        j->left = 0;
        if (j->busy == 0) {
            drop_job((int)(j - jobs));
            break;
        }
        pthread_cond_wait(&chunk_over, &lock);
    }
    pthread_mutex_unlock(&lock);
}
