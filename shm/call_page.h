/*
 * shm/call_page.h - the calls a client has in flight, published for the
 * daemon's watchdog in memory the worker never sees.
 *
 * The daemon creates one page per session (a memfd) and gives it to the
 * client with the OpenSession reply; it is never passed to a worker.  The
 * client publishes each call before sending it (id, kind, op, library,
 * deadline on CLOCK_MONOTONIC) and clears it when the call returns, how
 * ever it returns.  The watchdog kills the session's worker when a
 * published call passes its deadline, or runs longer than the daemon's
 * --max-timeout-ms by the daemon's own clock, even when the client is
 * gone.  Unlike the worker's status page, nothing an op does can change
 * what the watchdog enforces.
 *
 * Writes follow a seqlock: seq is odd while the client updates the page;
 * a reader retries until it sees the same even seq before and after.
 */
#ifndef MXOP_SHM_CALL_PAGE_H
#define MXOP_SHM_CALL_PAGE_H

#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#include "shm/call_stats.h"

#define MXOP__CALL_PAGE_MAGIC 0x4D58434Cu /* "MXCL" */
#define MXOP__CALL_PAGE_NAME 64

/* What a call asks of the library: named in the watchdog's messages. */
enum mxop__call_kind {
    MXOP__CALLK_NONE = 0,
    MXOP__CALLK_FORWARD,
    MXOP__CALLK_BACKWARD,
    MXOP__CALLK_INFER,
    MXOP__CALLK_STATE_CREATE,
    MXOP__CALLK_STATE_DESTROY,
    MXOP__CALLK_ATTACH_MAILBOX
};

typedef struct mxop__call_page {
    uint32_t magic;
    _Atomic uint32_t seq;
    uint64_t call_id;    /* the call in flight; 0: none */
    int64_t deadline_ns; /* CLOCK_MONOTONIC; 0: none (the daemon's maximum still applies) */
    int32_t kind;        /* enum mxop__call_kind */
    uint32_t pad;
    char op[MXOP__CALL_PAGE_NAME];      /* the op's name, or "" */
    char library[MXOP__CALL_PAGE_NAME]; /* its library, or "" */
    /*
     * The session's per-op counters (shm/call_stats.h), written by the
     * client after each call, read by the daemon for `mxop stats`.  Outside
     * the seqlock: each counter is its own relaxed atomic.
     */
    mxop__call_stats_t stats;
} mxop__call_page_t;

/*
 * Writes a name into a field of the page unless the field holds it
 * already: the client is the page's only writer, so a run of calls of one
 * op writes no name (strncpy pads the whole field, twice a call).
 */
static inline void mxop__call_page_name(char *field, const char *name)
{
    if (name == NULL)
        name = "";
    if (strncmp(field, name, MXOP__CALL_PAGE_NAME - 1) == 0)
        return;
    strncpy(field, name, MXOP__CALL_PAGE_NAME - 1);
    field[MXOP__CALL_PAGE_NAME - 1] = '\0';
}

/*
 * The client: publishes call `id` (0 clears the page; the names are only
 * read with a call, so a clear leaves them for the next call of the op).
 */
static inline void mxop__call_page_publish(mxop__call_page_t *p, uint64_t id, int64_t deadline_ns,
                                           int kind, const char *op, const char *library)
{
    uint32_t s = atomic_load_explicit(&p->seq, memory_order_relaxed);
    atomic_store_explicit(&p->seq, s + 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
    p->call_id = id;
    p->deadline_ns = deadline_ns;
    p->kind = kind;
    if (id != 0) {
        mxop__call_page_name(p->op, op);
        mxop__call_page_name(p->library, library);
    }
    atomic_store_explicit(&p->seq, s + 2, memory_order_release);
}

/* The daemon: a consistent copy into *out, or 0 when none could be had now (try later). */
static inline int mxop__call_page_read(const mxop__call_page_t *p, mxop__call_page_t *out)
{
    for (int tries = 0; tries < 64; tries++) {
        uint32_t s1 = atomic_load_explicit(&p->seq, memory_order_acquire);
        if (s1 & 1u)
            continue;
        out->call_id = *(const volatile uint64_t *)&p->call_id;
        out->deadline_ns = *(const volatile int64_t *)&p->deadline_ns;
        out->kind = *(const volatile int32_t *)&p->kind;
        memcpy(out->op, (const void *)p->op, sizeof(out->op));
        memcpy(out->library, (const void *)p->library, sizeof(out->library));
        atomic_thread_fence(memory_order_acquire);
        if (atomic_load_explicit(&p->seq, memory_order_relaxed) == s1) {
            out->op[sizeof(out->op) - 1] = '\0';
            out->library[sizeof(out->library) - 1] = '\0';
            return 1;
        }
    }
    return 0;
}

#endif /* MXOP_SHM_CALL_PAGE_H */
