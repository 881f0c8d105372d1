/*
 * shm/crowd.h - whether this machine has more runnable threads than CPUs.
 *
 * Spinning for a peer only pays when the peer has a CPU of its own to
 * answer on.  When more threads want to run than there are CPUs (a node
 * runs one training rank per GPU plus DataLoader workers), a spinning
 * waiter takes the CPU its peer needs, and every call waits for a
 * scheduler tick.  The mailbox asks this file before it spins.
 *
 * The answer comes from the kernel's count of runnable threads (the fourth
 * field of /proc/loadavg, "runnable/total"), read at most once per
 * MXOP__CROWD_PERIOD_NS per process and cached, so that asking costs a
 * clock read and no syscall.
 */
#ifndef MXOP_SHM_CROWD_H
#define MXOP_SHM_CROWD_H

#include <stdint.h>

/* How long one reading of the runnable count is trusted. */
#define MXOP__CROWD_PERIOD_NS (5 * 1000000LL)

/**
 * Whether more threads are runnable than this process may use CPUs
 * (its affinity mask, counted once).  `now_ns` is the caller's
 * CLOCK_MONOTONIC time.  The caller is itself among the runnable threads
 * counted, as it runs while it asks.  Returns 1 (crowded), 0 (not), or 0 when the count cannot be read (the
 * caller then relies on its own measure of spin successes).  Thread-safe.
 */
int mxop__crowd_check(int64_t now_ns);

/** The last runnable count read (-1 when none could be read), for tests and the bench. */
int mxop__crowd_runnable(void);

/** The number of CPUs this process may run on (at least 1). */
int mxop__crowd_cpus(void);

#endif /* MXOP_SHM_CROWD_H */
