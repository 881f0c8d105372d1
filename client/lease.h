/*
 * client/lease.h - a session's use of its uid's spin lease
 * (shm/lease_page.h, client/lease.c).
 */
#ifndef MXOP_CLIENT_LEASE_H
#define MXOP_CLIENT_LEASE_H

#include <stdint.h>

struct mxop__lease_page;

/* Where a session stands with its lease; changed only by lease_to (lease.c). */
typedef enum mxop__lease_state {
    MXOP__LEASE_NONE = 0, /* no page: the session spins as it would alone */
    MXOP__LEASE_FREE,     /* a page, and no slot held through this session */
    MXOP__LEASE_TAKEN,    /* a slot, taken for the call in flight */
    MXOP__LEASE_HELD,     /* a slot, held since an earlier call */
    MXOP__LEASE_OFF       /* a wait found the page stuck: no lease until off_until_ns */
} mxop__lease_state_t;

typedef struct mxop__lease {
    struct mxop__lease_page *page; /* mapped from the OpenSession reply; NULL in NONE */
    mxop__lease_state_t state;
    int slot;                /* TAKEN and HELD: the slot's index */
    int64_t off_until_ns;    /* OFF: until when */
    uint64_t waits, gave_up; /* calls that slept for a slot, and those that went on without */
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

/* mxop__lease_enter for a caller that has just read CLOCK_MONOTONIC (now_ns): no second read. */
int mxop__lease_enter_at(mxop__lease_t *l, int64_t now_ns);

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
