/*
 * shm/sockspin.h - the socket data path's short, adaptive busy-poll before
 * a blocking wait (client waiting for a result, worker waiting for the
 * next call).
 *
 * Why: on a machine whose other CPU is idle, a blocking wait on the socket
 * puts the waiter's CPU to sleep, and the peer's answer must wake it: on
 * this project's 2-vCPU guest that costs 25-50 us per hand-over
 * (docs/performance.md, target 1), several times the whole round trip.  A
 * waiter that polls the socket without blocking for a few tens of
 * microseconds keeps its CPU awake and takes the answer without any
 * wake-up.  Spinning only pays when the peer answers within the budget, so
 * the policy is the mailbox's (shm/mailbox.c): successes are averaged, and
 * when they become rare (a long op, more runnable processes than CPUs) the
 * waiter blocks at once, probing with a spin only now and then.  A wait
 * that ends in a block costs nothing while idle.
 */
#ifndef MXOP_SHM_SOCKSPIN_H
#define MXOP_SHM_SOCKSPIN_H

#include <stdint.h>

/*
 * The budget: SPIN_NS, cut towards SPIN_MIN_NS as recent waits grow longer
 * (spinning would not have caught them).  Each look is a syscall (about
 * 1.2 us here), so even the smallest budget takes a few looks.
 */
#define MXOP__SOCKSPIN_NS 50000
#define MXOP__SOCKSPIN_MIN_NS 4000
/* Successes over about the last 16 spins, in 1/1024ths; under a quarter, probe 1 wait in 16. */
#define MXOP__SOCKSPIN_HIT_ONE 1024
#define MXOP__SOCKSPIN_HIT_MIN 256
#define MXOP__SOCKSPIN_PROBE_EVERY 16
/*
 * A probe's budget: each probe that fails costs this much CPU, on a
 * machine where the peers cannot answer (6 socket sessions on 2 CPUs: a
 * full 50 us probe made fixed work 1.12x slower).
 */
#define MXOP__SOCKSPIN_PROBE_NS 10000

/* One waiting side's state; zero it with mxop__sockspin_init. */
typedef struct mxop__sockspin {
    int64_t wait_avg_ns; /* moving average of recent waits */
    int32_t hit_rate;    /* moving average of spin successes, in 1/HIT_ONE */
    uint32_t unspun;     /* waits since the last spin, while spins do not pay */
    int off;             /* 1: never spin ($MXOP_SOCKET_SPIN=0) */
    /* What the policy did, for tests (never reset). */
    uint64_t n_spins, n_spin_hits, n_skip_rare;
} mxop__sockspin_t;

/* Starts out spinning, unless $MXOP_SOCKET_SPIN is "0". */
void mxop__sockspin_init(mxop__sockspin_t *s);

/*
 * Waits up to the budget for `ready(arg)` to say 1 (each call of it one
 * non-blocking look), unless spins stopped paying.  Returns 1 when ready
 * said so, 0 when the caller should block, and a negative value that
 * ready returned (an error to handle as the blocking path would).
 */
int mxop__sockspin_wait(mxop__sockspin_t *s, int (*ready)(void *arg), void *arg);

/* Records how long a whole wait took (spin and block), for the budget. */
void mxop__sockspin_note_wait(mxop__sockspin_t *s, int64_t waited_ns);

#endif /* MXOP_SHM_SOCKSPIN_H */
