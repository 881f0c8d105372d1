/*
 * shm/placement.c - a worker keeps off its client's CPU while calls flow
 * through the mailbox (see placement.h for why).
 */
#include "shm/placement.h"

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

/* The affinity at start: every later choice stays within it. */
static cpu_set_t allowed;
static int on;

void mxop__placement_init(void)
{
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
    return sched_setaffinity(0, sizeof want, &want) == 0 ? 1 : -1;
}
