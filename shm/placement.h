/*
 * shm/placement.h - where a worker runs relative to its client while calls
 * flow through the shared-memory mailbox.
 *
 * Why: on the mailbox path both sides spin, and a spin can only succeed
 * when the peer runs at the same time on another CPU.  With more
 * processes than CPUs the scheduler often puts a client and its own worker
 * on one CPU, where each call then costs two context switches (3.2-3.5 us
 * a round trip on this project's 2-vCPU guest, against 0.1-0.3 us for a
 * spin across CPUs).  So while calls flow, the worker keeps off the CPU
 * its client last wrote from (the mailbox slot's `cpu`, written by the
 * client with sched_getcpu()), within the CPUs it was allowed at start.
 * Only the shortest calls gain from this: when calls take longer than
 * MXOP__PLACEMENT_LONG_NS on average the worker gets all its CPUs back.
 * On by default;
 * MXOP_PLACEMENT=0 in the daemon's environment turns it off.  It was
 * opt-in while a relu of 1 MiB from PyTorch ran 2.7-3.9x slower with it:
 * that was the client sleeping through calls just longer than its spin
 * (client/spincap.c has fixed that), and with the spin that follows the
 * waits the row is the same with and without placement (1.14x-1.19x
 * against 1.19x, `python -m mxop.bench`, alternating).
 *
 * The other way round when a client's process has more calls in flight
 * than CPUs (two threads calling ops of about 100 us on two CPUs): the
 * client sleeps through each call (MXOP__MBOX_CROWDED, shm/mailbox.h), and
 * the worker moves to the CPU its client sleeps on.  Woken by the answer,
 * the client is then queued where its worker, about to spin for the next
 * call, yields at each look (the client is on its CPU), instead of behind
 * the other pair's op on the other CPU while this worker spins for a call
 * that cannot come (the scheduler does not move a task that ran there a
 * moment ago).  Each pair then takes turns on one CPU (make bench section
 * 7: two threads calling relu 4 MiB 1.68-1.75x one, against 1.52-1.63x).
 *
 * The client's CPU number is only a hint from an untrusted peer: a value
 * out of range, a CPU outside the worker's allowed set, or a set that
 * would be left empty changes nothing, and a failing sched_setaffinity
 * (an offline CPU, a cpuset changed meanwhile) is ignored.
 */
#ifndef MXOP_SHM_PLACEMENT_H
#define MXOP_SHM_PLACEMENT_H

#include <sched.h> /* cpu_set_t: the build defines _GNU_SOURCE */

/*
 * Calls that take longer than this on average (over about the last 8, the
 * worker's wall time) give the worker all its CPUs back.  Measured:
 * keeping the worker off its client's CPU
 * multiplies the calls/s of several processes of null ops, but made relu
 * of 1 MiB (a 20 us op whose output the client then reads on its own CPU)
 * 1.5-2.4x slower when a line of 20 us on the last call alone let half of
 * those calls through; so only calls of a few microseconds keep the
 * worker away.
 */
#define MXOP__PLACEMENT_LONG_NS (10 * 1000)

/*
 * The CPUs to run on to keep off peer_cpu: 1 with *out filled in when
 * this side, on my_cpu, should move (it runs on peer_cpu, and `allowed`
 * has another CPU), else 0.  Pure, for tests.
 */
int mxop__placement_away(int peer_cpu, int my_cpu, const cpu_set_t *allowed, cpu_set_t *out);

/*
 * The CPUs to run on to join peer_cpu: 1 with *out = {peer_cpu} when
 * `allowed` has it, else 0.  Pure, for tests.
 */
int mxop__placement_near(int peer_cpu, const cpu_set_t *allowed, cpu_set_t *out);

/*
 * Takes the affinity the process has now as the CPUs every later choice
 * stays within (placement is off where $MXOP_PLACEMENT is 0, and with
 * fewer than 2 CPUs).
 */
void mxop__placement_init(void);

/*
 * Moves the calling process off peer_cpu if mxop__placement_away says so,
 * within the affinity mxop__placement_init took.  Costs a sched_getcpu()
 * (no syscall) when nothing is to be done.  Returns 1 if it moved, 0 if not, -1 if
 * sched_setaffinity failed.
 */
int mxop__placement_keep_off(int peer_cpu);

/*
 * Moves the calling thread onto peer_cpu unless it is there already (and
 * gives it back every CPU mxop__placement_init took, so that the scheduler
 * may move it again): for a client whose process's calls in flight fill
 * the CPUs, which sleeps through each call (shm/mailbox.h,
 * MXOP__MBOX_CROWDED).  Returns 1 if it moved, 0 if not, -1 if
 * sched_setaffinity failed.
 */
int mxop__placement_join(int peer_cpu);

/*
 * Gives every thread of the process back the affinity mxop__placement_init
 * took, if mxop__placement_keep_off moved it: called after a long call,
 * where the CPUs an op may use matter more than a spin's success (a
 * worker kept on one CPU of two would run a multi-threaded gemm on one).
 */
void mxop__placement_release(void);

#endif /* MXOP_SHM_PLACEMENT_H */
