/*
 * shm/crowd.c - the runnable-thread count against the CPUs (see crowd.h).
 */
#include "shm/crowd.h"

#include <fcntl.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

/* The reading in force; one thread at a time renews it (the one that wins next_ns). */
static _Atomic int64_t next_ns;
static _Atomic int runnable = -1;
static _Atomic int cpus;

int mxop__crowd_cpus(void)
{
    int n = atomic_load_explicit(&cpus, memory_order_relaxed);
    if (n > 0)
        return n;
    cpu_set_t set;
    CPU_ZERO(&set);
    n = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 0;
    if (n <= 0) {
        long online = sysconf(_SC_NPROCESSORS_ONLN);
        n = online > 0 ? (int)online : 1;
    }
    atomic_store_explicit(&cpus, n, memory_order_relaxed);
    return n;
}

/*
 * The fourth field of /proc/loadavg ("0.01 0.23 0.16 4/98 14973"): the
 * threads runnable right now, the reader included.  -1 when unreadable.
 * The file is opened for each reading (every few milliseconds at most) so
 * that no descriptor is held behind the caller's back.
 */
static int read_runnable(void)
{
    char buf[128];
    int fd = open("/proc/loadavg", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return -1;
    buf[n] = '\0';
    char *p = buf;
    for (int field = 0; field < 3; field++) {
        while (*p != '\0' && *p != ' ')
            p++;
        while (*p == ' ')
            p++;
    }
    if (*p < '0' || *p > '9')
        return -1;
    long r = strtol(p, &p, 10);
    return *p == '/' && r >= 0 && r < 1000000 ? (int)r : -1;
}

int mxop__crowd_check(int64_t now_ns)
{
    int64_t next = atomic_load_explicit(&next_ns, memory_order_relaxed);
    if (now_ns >= next &&
        atomic_compare_exchange_strong_explicit(&next_ns, &next, now_ns + MXOP__CROWD_PERIOD_NS,
                                                memory_order_relaxed, memory_order_relaxed))
        atomic_store_explicit(&runnable, read_runnable(), memory_order_relaxed);
    int r = atomic_load_explicit(&runnable, memory_order_relaxed);
    return r > mxop__crowd_cpus();
}

int mxop__crowd_runnable(void)
{
    return atomic_load_explicit(&runnable, memory_order_relaxed);
}
