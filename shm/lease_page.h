/*
 * shm/lease_page.h - the spin lease: which client processes of one user may
 * spin on the shared-memory path right now.
 *
 * A call that spins keeps two CPUs busy: its client thread, spinning for
 * the result, and its worker.  A spin pays only while both run at once.
 * With more client processes than CPU pairs (eight processes and their
 * workers on two CPUs), the scheduler runs them in any order, and most
 * spins wait for a peer that has no CPU: the calls fall to the rate of
 * wake-ups.  The lease lets only as many processes spin as the machine has
 * CPU pairs (the slots).  A process without a slot waits for one, asleep,
 * before it sends its call; a holder passes its slot on after a quantum
 * when others wait.  So the pairs take turns, each at the speed of one pair
 * alone, instead of all crawling.
 *
 * The daemon makes one page per client uid (a memfd) and gives it to every
 * session of that uid (the third fd of the OpenSession reply); it is never
 * passed to a worker.  Processes of one uid can already do anything to each
 * other, so the page needs no defence against them beyond bounded waits:
 * everything on it is a hint, and a client that finds it unusable (a
 * holder that never lets go, a wait with no release for
 * MXOP__LEASE_STUCK_NS) goes on without it for a while, as if there were
 * no page.
 *
 * Slot holders are process ids.  All fields are atomics; `gen` is the
 * futex word waiters sleep on, bumped at every release.
 */
#ifndef MXOP_SHM_LEASE_PAGE_H
#define MXOP_SHM_LEASE_PAGE_H

#include <stdatomic.h>
#include <stdint.h>

#define MXOP__LEASE_MAGIC 0x4D584C53u /* "MXLS" */
#define MXOP__LEASE_SLOTS_MAX 64

/* How long a holder keeps its slot while others wait. */
#define MXOP__LEASE_QUANTUM_NS 2000000
/* A holder that made no call for this long is gone or idle: its slot may be taken. */
#define MXOP__LEASE_STALE_NS 300000
/* After a hand-over the slot is kept for a woken waiter this long. */
#define MXOP__LEASE_HANDOFF_NS 100000
/* A waiter not woken by then looks again for a holder gone or idle. */
#define MXOP__LEASE_NAP_NS 10000000
/* A wait in which no slot was released for this long: the page is stuck; go on without it. */
#define MXOP__LEASE_STUCK_NS 50000000
/* The longest a call waits for a slot, however many others take their turns first. */
#define MXOP__LEASE_WAIT_MAX_NS 1000000000

typedef struct mxop__lease_slot {
    _Atomic uint32_t holder;       /* a process id; 0: free */
    _Atomic uint32_t released_by;  /* the holder that last handed it over */
    _Atomic int64_t since_ns;      /* when the holder took it (CLOCK_MONOTONIC) */
    _Atomic int64_t last_ns;       /* the holder's last call */
    _Atomic int64_t handoff_until; /* kept for a woken waiter until then */
    char pad[32];                  /* one cache line per slot */
} mxop__lease_slot_t;

typedef struct mxop__lease_page {
    uint32_t magic;
    uint32_t n_slots;           /* set by the daemon: the CPU pairs it sees, 1 to SLOTS_MAX */
    _Atomic uint32_t gen;       /* futex: bumped at each release */
    _Atomic uint32_t waiters;   /* processes asleep on gen */
    _Atomic uint64_t handovers; /* slots passed on at the end of a quantum, for tests */
    char pad[40];
    mxop__lease_slot_t slots[MXOP__LEASE_SLOTS_MAX];
} mxop__lease_page_t;

#endif /* MXOP_SHM_LEASE_PAGE_H */
