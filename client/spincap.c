/*
 * client/spincap.c - the spin cap of a client's wait for a result.
 *
 * A client that waits for an op of tens of microseconds does best to spin
 * through it (shm/mailbox.h): sleeping costs the wake-up of a halted CPU,
 * longer than the op.  But a spinning thread holds a CPU, and each call in
 * flight has a worker that needs one too.  Two threads of one process, each
 * calling relu of 4 MiB on two CPUs (`make bench` section 7, calls/s of two
 * threads over one): spinning up to the long cap 1.14x and 1.20x, up to
 * 50 us 1.50x-1.71x, not spinning 1.80x-1.84x.  So a call spins (up to the
 * long cap) only while every call in flight in this process, its thread and
 * its worker, can have a CPU of their own; beyond that it sleeps on the
 * bell at once, and the CPUs go to the workers.  A worker counts for the
 * CPUs it said its last call kept busy (an op's product on two BLAS
 * threads: two), so that one call's spin does not take the CPU its op's
 * second thread wants (docs/performance.md, "BLAS threads and the spin").  A
 * call that started after this one began to spin does not shorten the
 * spin; with calls back to back, the next call sees it.  Other processes'
 * spins are not seen here; spins that fail because of them end spinning
 * through the success rate (shm/mailbox.c).
 */
#include "client/spincap.h"

#include <sched.h>
#include <stdatomic.h>
#include <unistd.h>

#include "shm/mailbox.h"

/* The CPUs the calls in flight want: each its waiting thread and its worker's. */
static _Atomic int in_flight;
static _Atomic int cpus_cached;
static _Atomic int every_cpu; /* 1: those CPUs are all the online ones (set with cpus_cached) */

/* The CPUs this process may run on, read once (0 until then). */
static int cpus(void)
{
    int n = atomic_load_explicit(&cpus_cached, memory_order_acquire);
    if (n > 0)
        return n;
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof(set), &set) == 0)
        n = CPU_COUNT(&set);
    long on = sysconf(_SC_NPROCESSORS_ONLN);
    if (n <= 0)
        n = on > 0 ? (int)on : 1;
    atomic_store_explicit(&every_cpu, on > 0 && n >= on, memory_order_relaxed);
    atomic_store_explicit(&cpus_cached, n, memory_order_release); /* after every_cpu */
    return n;
}

/* A call's claim: its waiting thread and its worker's CPUs (at least one, at most 64). */
static int claim(int worker_cpus)
{
    return 1 + (worker_cpus < 1 ? 1 : worker_cpus > 64 ? 64 : worker_cpus);
}

int64_t mxop__spincap_enter(int worker_cpus)
{
    int want = atomic_fetch_add_explicit(&in_flight, claim(worker_cpus), memory_order_relaxed) +
               claim(worker_cpus);
    return want <= cpus() ? MXOP__MBOX_SPIN_LONG_NS : 0;
}

void mxop__spincap_leave(int worker_cpus)
{
    atomic_fetch_sub_explicit(&in_flight, claim(worker_cpus), memory_order_relaxed);
}

/* This process's calls in flight that said CROWDED, by the CPU their thread was on. */
#define CROWD_CPUS 64
static _Atomic int crowd_on[CROWD_CPUS];

/* 1 when the process may run on every online CPU (as read with the first call's cap). */
static int unpinned(void)
{
    cpus();
    return atomic_load_explicit(&every_cpu, memory_order_relaxed);
}

int mxop__spincap_crowd_enter(int64_t spin_cap)
{
    if (spin_cap > 0 || !unpinned())
        return -1;
    int cpu = sched_getcpu();
    if (cpu < 0 || cpu >= CROWD_CPUS)
        return -1;
    if (atomic_fetch_add_explicit(&crowd_on[cpu], 1, memory_order_relaxed) != 0) {
        atomic_fetch_sub_explicit(&crowd_on[cpu], 1, memory_order_relaxed);
        return -1;
    }
    return cpu;
}

void mxop__spincap_crowd_leave(int cpu)
{
    if (cpu >= 0 && cpu < CROWD_CPUS)
        atomic_fetch_sub_explicit(&crowd_on[cpu], 1, memory_order_relaxed);
}
