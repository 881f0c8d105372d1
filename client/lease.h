/*
 * client/lease.h - a session's use of its uid's spin lease
 * (shm/lease_page.h, client/lease.c).
 */
#ifndef MXOP_CLIENT_LEASE_H
#define MXOP_CLIENT_LEASE_H

#include <stdint.h>

struct mxop__lease_page;

typedef struct mxop__lease {
    struct mxop__lease_page *page; /* mapped from the OpenSession reply; NULL: none */
    int slot;                      /* the slot this session last found its process holding; -1 */
    int fresh;                     /* the slot was taken for the call in flight */
    int64_t off_until_ns;          /* a wait ran past its bound: no lease until then */
    uint64_t waits, gave_up;       /* calls that slept for a slot, and those that went on without */
} mxop__lease_t;

/*
 * Maps the page in memfd `fd` (not closed).  Returns 0, or -1 when it is
 * not a lease page (the session goes on without one).
 */
int mxop__lease_map(mxop__lease_t *l, int fd);

/* Lets go of any slot this process holds through the page, and unmaps it. */
void mxop__lease_unmap(mxop__lease_t *l);

/*
 * Before a call that will spin for its result: returns once this process
 * holds a slot, or once waiting for one is past its bound.  Returns 1 when
 * a slot is held.
 */
int mxop__lease_enter(mxop__lease_t *l);

/*
 * Before a call that will not spin: a process that does not spin holds no
 * slot, so it lets its slot go.
 */
void mxop__lease_leave(mxop__lease_t *l);

/*
 * After a spin that failed (a long op, or a worker without a CPU): lets the
 * slot go, unless it was taken for this very call (a worker that slept
 * through the other processes' turns may miss the first spin of its own).
 */
void mxop__lease_spin_failed(mxop__lease_t *l);

#endif
