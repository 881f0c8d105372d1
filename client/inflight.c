/*
 * client/inflight.c - which worker runs the calling thread's call.
 *
 * Python's Ctrl-C abandons a call by killing the worker running it (the
 * session then gets a new worker, as after a crash).  With a pool of
 * sessions (pool.c) the caller cannot know which session's worker that is:
 * only libmxop does, once it has chosen.  So a thread may name a slot
 * (mxop_set_inflight_slot); every forward or backward it makes publishes
 * there the pid of the worker it was sent to, on the client's own session
 * or on a sibling's, and 0 once it returns.  The watcher (another thread)
 * reads the slot: a plain aligned 32-bit store and load, atomic on every
 * platform libmxop runs on, made with the compiler's atomics to say so.
 */
#include <stddef.h>

#include "client/inflight.h"
#include "mxop/client.h"

/* The calling thread's slot (NULL: none named). */
static _Thread_local int32_t *slot;

void mxop_set_inflight_slot(int32_t *s)
{
    slot = s;
}

int32_t mxop__inflight_enter(int32_t pid)
{
    int32_t *s = slot;
    if (s == NULL)
        return 0;
    int32_t prev = __atomic_load_n(s, __ATOMIC_RELAXED);
    __atomic_store_n(s, pid, __ATOMIC_RELEASE);
    return prev;
}

void mxop__inflight_leave(int32_t prev)
{
    int32_t *s = slot;
    if (s != NULL)
        __atomic_store_n(s, prev, __ATOMIC_RELEASE);
}
