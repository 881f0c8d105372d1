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
 * Whether a call with this spin cap says it is crowded (shm/mailbox.h,
 * MXOP__MBOX_CROWDED): only when it does not spin (cap 0: its process's
 * calls in flight fill the CPUs), the process may run on every online CPU
 * (where the scheduler placed a thread it may move is worth following; a
 * CPU an engine pinned its threads to is not), and no other call of this
 * process already said so from this thread's CPU (two threads sleeping on
 * one CPU, as Python's do, woken where the one that let go of the GIL
 * runs, would otherwise draw both their workers to it while the other CPUs
 * idle).  Returns the CPU it claims for the call, or -1 (say SLEEPING).
 * Paired with mxop__spincap_crowd_leave(cpu) when the call is over.
 */
int mxop__spincap_crowd_enter(int64_t spin_cap);
void mxop__spincap_crowd_leave(int cpu);

#endif
