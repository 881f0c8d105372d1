/*
 * server/daemon/worker/idle_cpu.c - a worker that burns CPU with no call in flight.
 *
 * A library may leave threads spinning after its op returned success; the
 * deadline does not see them (no call is running), and they take cores
 * from every other session for as long as the worker lives.  The watchdog
 * asks here, for each idle worker, whether it used more than
 * MXOP__IDLE_CPU_MAX_MS of CPU (utime + stime of all its threads, from
 * /proc/<pid>/stat) since it was last seen running a call; if so the
 * worker is killed and replaced, the reason logged.
 *
 * The baseline moves whenever a call ran since the last look (busy, or a
 * new call id): the worker's own spin on the mailbox between calls of a
 * busy client never accumulates.  /proc is read at most every
 * MXOP__IDLE_CPU_CHECK_MS per worker.  Entries of workers not asked
 * about for a while (dead ones) are dropped.
 */
#include "server/daemon/worker/worker.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/util.h"
#include "server/daemon/worker/procstat.h"

#define SLOTS 256
#define STALE_NS (10LL * 1000000000LL)

typedef struct entry {
    pid_t pid; /* 0: free */
    uint64_t call_id;
    int64_t seen_ns;    /* last asked about */
    int64_t checked_ns; /* last read /proc */
    long long base;     /* CPU ticks when last seen in a call; -1: take it at the next read */
} entry_t;

static entry_t table[SLOTS];

/* utime + stime of the whole process, in clock ticks; -1 if unknown. */
static long long cpu_ticks(pid_t pid)
{
    char buf[1024];
    const char *p = mxop__proc_stat(pid, buf, sizeof(buf));
    if (p == NULL)
        return -1;
    /* p is field 3; utime and stime are fields 14 and 15. */
    for (int field = 3; field < 14; field++) {
        p = strchr(p, ' ');
        if (p == NULL)
            return -1;
        p++;
    }
    char *end;
    long long ut = strtoll(p, &end, 10);
    long long st = strtoll(end, NULL, 10);
    return ut + st;
}

static entry_t *lookup(pid_t pid, int64_t now)
{
    entry_t *free_slot = NULL;
    for (int i = 0; i < SLOTS; i++) {
        entry_t *e = &table[i];
        if (e->pid != 0 && now - e->seen_ns > STALE_NS)
            e->pid = 0;
        if (e->pid == pid)
            return e;
        if (e->pid == 0 && free_slot == NULL)
            free_slot = e;
    }
    if (free_slot != NULL)
        *free_slot = (entry_t){pid, 0, now, 0, -1};
    return free_slot;
}

int mxop__idle_cpu_over(pid_t pid, bool busy, uint64_t call_id, char *msg, size_t msglen)
{
    int64_t now = mxop__now_ns();
    entry_t *e = lookup(pid, now);
    if (e == NULL)
        return 0; /* more workers than slots: those are not watched */
    e->seen_ns = now;
    if (busy || call_id != e->call_id) {
        e->call_id = call_id;
        e->base = -1;
        return 0;
    }
    if (now - e->checked_ns < (int64_t)MXOP__IDLE_CPU_CHECK_MS * 1000000)
        return 0;
    e->checked_ns = now;
    long long t = cpu_ticks(pid);
    if (t < 0)
        return 0;
    if (e->base < 0) {
        e->base = t;
        return 0;
    }
    long hz = sysconf(_SC_CLK_TCK);
    long long used_ms = (t - e->base) * 1000 / (hz > 0 ? hz : 100);
    if (used_ms <= MXOP__IDLE_CPU_MAX_MS)
        return 0;
    mxop__fmt(msg, msglen,
              "it used %lld ms of CPU with no call in flight (more than %d ms: a thread an op "
              "left running?) and was replaced",
              used_ms, MXOP__IDLE_CPU_MAX_MS);
    e->pid = 0;
    return 1;
}
