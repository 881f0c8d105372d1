/*
 * shm/placement.c - a worker keeps off its client's CPU while short calls
 * flow through the mailbox, and moves to it while its client's process has
 * more calls in flight than CPUs (see placement.h for why).
 */
#include "shm/placement.h"

#include <dirent.h>
#include <stdlib.h>
#include <string.h>

int mxop__placement_away(int peer_cpu, int my_cpu, const cpu_set_t *allowed, cpu_set_t *out)
{
    if (peer_cpu < 0 || peer_cpu >= CPU_SETSIZE || peer_cpu != my_cpu)
        return 0;
    if (!CPU_ISSET(peer_cpu, allowed))
        return 0;
    *out = *allowed;
    CPU_CLR(peer_cpu, out);
    return CPU_COUNT(out) > 0;
}

int mxop__placement_near(int peer_cpu, const cpu_set_t *allowed, cpu_set_t *out)
{
    if (peer_cpu < 0 || peer_cpu >= CPU_SETSIZE || !CPU_ISSET(peer_cpu, allowed))
        return 0;
    CPU_ZERO(out);
    CPU_SET(peer_cpu, out);
    return 1;
}

/* The affinity at start: every later choice stays within it. */
static cpu_set_t allowed;
static int on;
static int restricted; /* this process was moved off its peer's CPU and not released since */

void mxop__placement_init(void)
{
    /* On unless turned off (placement.h). */
    const char *e = getenv("MXOP_PLACEMENT");
    on = !(e != NULL && strcmp(e, "0") == 0) &&
         sched_getaffinity(0, sizeof allowed, &allowed) == 0 && CPU_COUNT(&allowed) >= 2;
}

int mxop__placement_keep_off(int peer_cpu)
{
    if (!on)
        return 0;
    cpu_set_t want;
    if (!mxop__placement_away(peer_cpu, sched_getcpu(), &allowed, &want))
        return 0;
    if (sched_setaffinity(0, sizeof want, &want) != 0)
        return -1;
    restricted = 1;
    return 1;
}

int mxop__placement_join(int peer_cpu)
{
    if (!on || sched_getcpu() == peer_cpu)
        return 0;
    cpu_set_t want;
    if (!mxop__placement_near(peer_cpu, &allowed, &want))
        return 0;
    /*
     * A move, not a pin: held to one CPU, two workers whose clients both
     * last ran on CPU 0 would stay there while CPU 1 idles (the balancer
     * cannot take a pinned task).  Given back its CPUs at once, the worker
     * stays where it was moved until the scheduler has a reason to move it.
     */
    if (sched_setaffinity(0, sizeof want, &want) != 0)
        return -1;
    if (restricted)
        mxop__placement_release();
    else
        sched_setaffinity(0, sizeof allowed, &allowed);
    return 1;
}

void mxop__placement_release(void)
{
    if (!restricted)
        return;
    restricted = 0;
    /*
     * Every thread: those an op started while the process was restricted
     * (OpenBLAS's pool, created at its first product) inherited the
     * restriction.  /proc stays readable in the sandbox (landlock.c).
     */
    sched_setaffinity(0, sizeof allowed, &allowed);
    DIR *d = opendir("/proc/self/task");
    if (d == NULL)
        return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        int tid = atoi(e->d_name);
        if (tid > 0)
            sched_setaffinity(tid, sizeof allowed, &allowed);
    }
    closedir(d);
}
