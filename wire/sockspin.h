/*
 * wire/sockspin.h - the socket data path's short, adaptive busy-poll before
 * a blocking wait (client waiting for a result, worker waiting for the
 * next call).
 *
 * Why: on a machine whose other CPU is idle, a blocking wait on the socket
 * puts the waiter's CPU to sleep, and the peer's answer must wake it: on
 * this project's 2-vCPU guest that costs 25-50 us per hand-over
 * (make bench section 1), several times the whole round trip.  A
 * waiter that polls the socket without blocking for a few tens of
 * microseconds keeps its CPU awake and takes the answer without any
 * wake-up.  Spinning only pays when the peer answers within the budget, so
 * the policy is the mailbox's (shm/mailbox.c): successes are averaged, and
 * when they become rare (a long op, more runnable processes than CPUs) the
 * waiter blocks at once, probing with a spin only now and then (less
 * often after each probe that fails).  A wait that ends in a block costs
 * nothing while idle.
 *
 * With more runnable processes than CPUs the scheduler puts each client
 * beside its worker on one CPU, and there the two sides' spins differ:
 *  - the worker spins after its answer has woken the client on its own
 *    CPU, so the client waits behind the spin.  Such a spin only "ends in
 *    the answer" because the scheduler preempted it; counted a success,
 *    it kept workers spinning 50 us at a time beside their waiting
 *    clients (two socket sessions on two CPUs made 0.74-0.85x the calls/s
 *    of one, make bench section 6).  So the worker's side
 *    (MXOP__SOCKSPIN_WORKER) counts a spin that lost its CPU as a failure
 *    and blocks at once;
 *  - the client spins after its call has woken the worker, which then
 *    preempts it (a task just woken runs first).  Its spin costs little,
 *    and keeps both sides runnable, so that the scheduler moves one of
 *    them onto an idle CPU, if there is one.  Counted as the worker
 *    counts, one session alone on two CPUs was sometimes left with client
 *    and worker blocking by turns on one CPU, the other idle (23k-163k
 *    calls/s against 122k-165k).  So the client's side
 *    (MXOP__SOCKSPIN_CLIENT) counts any answer within the budget a
 *    success.
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
 * Failed probes space the next ones out, up to 1 wait in this many: with a
 * worker beside its client on one CPU (two socket sessions on two CPUs),
 * a probe every 16 waits kept the client off its CPU often enough to cost
 * a fifth of the calls/s.
 */
#define MXOP__SOCKSPIN_PROBE_EVERY_MAX 1024
/*
 * A probe's budget: each probe that fails costs this much CPU, on a
 * machine where the peers cannot answer (6 socket sessions on 2 CPUs: a
 * full 50 us probe made fixed work 1.12x slower).
 */
#define MXOP__SOCKSPIN_PROBE_NS 10000
/*
 * A look that took longer than this means the spinner was off its CPU
 * meanwhile: a look is one system call (0.2-1.2 us here), and leaving the
 * CPU and coming back takes two context switches (3 us or more).
 */
#define MXOP__SOCKSPIN_GAP_NS 5000

/* Which side waits: what a spin that lost its CPU counts as (see above). */
typedef enum mxop__sockspin_side {
    MXOP__SOCKSPIN_CLIENT = 0, /* an answer within the budget is a success */
    MXOP__SOCKSPIN_WORKER      /* a spin that lost its CPU is a failure, and ends */
} mxop__sockspin_side_t;

/* One waiting side's state; zero it with mxop__sockspin_init. */
typedef struct mxop__sockspin {
    int64_t wait_avg_ns;  /* moving average of recent waits */
    int32_t hit_rate;     /* moving average of spin successes, in 1/HIT_ONE */
    uint32_t unspun;      /* waits since the last spin, while spins do not pay */
    uint32_t probe_every; /* waits from one probe to the next, while spins do not pay */
    mxop__sockspin_side_t side;
    int off; /* 1: never spin ($MXOP_SOCKET_SPIN=0) */
    /* What the policy did, for tests (never reset); n_lost_cpu: spins that lost their CPU. */
    uint64_t n_spins, n_spin_hits, n_skip_rare, n_lost_cpu;
} mxop__sockspin_t;

/* Starts out spinning, unless $MXOP_SOCKET_SPIN is "0". */
void mxop__sockspin_init(mxop__sockspin_t *s, mxop__sockspin_side_t side);

/*
 * Waits up to the budget for `ready(arg)` to say 1 (each call of it one
 * non-blocking look), unless spins stopped paying.  Returns 1 when ready
 * said so, 0 when the caller should block, and a negative value that
 * ready returned (an error to handle as the blocking path would).  On the
 * worker's side a spin counts as a success only when a look after the
 * first found the answer with the spinner on its CPU throughout; an
 * answer at the first look was there before any spin and counts neither
 * way.
 */
int mxop__sockspin_wait(mxop__sockspin_t *s, int (*ready)(void *arg), void *arg);

/* Records how long a whole wait took (spin and block), for the budget. */
void mxop__sockspin_note_wait(mxop__sockspin_t *s, int64_t waited_ns);

#endif /* MXOP_SHM_SOCKSPIN_H */
