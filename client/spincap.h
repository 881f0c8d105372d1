/*
 * client/spincap.h - how far a client thread's spin for its result may
 * follow long waits (client/spincap.c).
 */
#ifndef MXOP_CLIENT_SPINCAP_H
#define MXOP_CLIENT_SPINCAP_H

#include <stdint.h>

/*
 * Counts a call of the calling thread as in flight (from before its request
 * is published to its result) and returns the spin cap for its wait
 * (mxop__mbox_spin): MXOP__MBOX_SPIN_LONG_NS while the process's calls in
 * flight, each a waiting thread and its worker's `worker_cpus` (what the
 * worker said its last call kept busy, shm/mailbox.h), fit the CPUs it may
 * run on, else 0 (no spin: sleep on the bell at once).  Paired with
 * mxop__spincap_leave, given the same worker_cpus.
 */
int64_t mxop__spincap_enter(int worker_cpus);

/* The call is over. */
void mxop__spincap_leave(int worker_cpus);

/*
 * 1 when the process may run on every online CPU (as read with the first
 * call's cap).  Only then does a call that sleeps for want of CPUs say it
 * is crowded (shm/mailbox.h, MXOP__MBOX_CROWDED): where the scheduler placed
 * a thread it may move is worth following; a CPU an engine pinned its
 * threads to is not (two threads pinned to one CPU would draw both their
 * workers there).
 */
int mxop__spincap_unpinned(void);

/*
 * A call about to say CROWDED claims its thread's CPU for it: returns the
 * CPU, or -1 when another call of this process already said CROWDED from
 * it (or the CPU is not known), and the call then says plain SLEEPING.
 * Two threads that sleep on one CPU (as Python's threads do, woken where
 * the one that let go of the GIL runs) would otherwise draw both their
 * workers to it while the other CPUs idle.  Paired with
 * mxop__spincap_crowd_leave(cpu) when the call is over.
 */
int mxop__spincap_crowd_enter(void);
void mxop__spincap_crowd_leave(int cpu);

#endif
