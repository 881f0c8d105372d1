/*
 * server/daemon/worker_proc.c - what /proc says about a worker and the
 * processes around it: whether a peer of the control socket descends from
 * a worker, and whether a worker is stopped.  The daemon's own reading,
 * never the worker's word.
 */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/util.h"
#include "server/daemon/cgroup.h"
#include "server/daemon/daemon.h"
#include "server/daemon/procstat.h"

/* The parent of `pid` from /proc, or 0 when it cannot be read. */
static pid_t parent_of(pid_t pid)
{
    char buf[512];
    const char *fields = mxop__proc_stat(pid, buf, sizeof(buf));
    char state;
    int ppid;
    if (fields == NULL || sscanf(fields, "%c %d", &state, &ppid) != 2)
        return 0;
    return (pid_t)ppid;
}

bool mxop__is_worker_process(mxop__daemon_t *d, pid_t pid)
{
    if (pid <= 0)
        return false;
    /* Workers lead their own sessions: a process in one is the worker or what its ops started. */
    pid_t sid = getsid(pid);
    for (mxop__list_t *n = d->workers.next; n != &d->workers; n = n->next) {
        mxop__worker_t *w = MXOP__CONTAINER_OF(n, mxop__worker_t, link);
        if (!w->exited && (w->pid == pid || sid == w->pid))
            return true;
    }
    /*
     * A session is easy to leave (setsid); ancestry is not.  The daemon's
     * only descendants are its workers and what their ops started (escaped
     * ones are reparented to it, the subreaper), so a peer with the daemon
     * among its ancestors came from a worker, whatever its session.
     */
    pid_t p = pid;
    for (int depth = 0; depth < 64 && p > 1; depth++) {
        if (p == d->pid)
            return true;
        p = parent_of(p);
    }
    /*
     * Nor can ancestry be the only word: a worker's cgroup holds all it
     * started, whoever its parent is now (cgroup.c).
     */
    return mxop__cgroup_holds_worker_process(pid);
}

bool mxop__worker_is_stopped(const mxop__worker_t *w)
{
    if (w->exited)
        return false;
    char buf[256];
    const char *fields = mxop__proc_stat(w->pid, buf, sizeof(buf));
    if (fields == NULL || (fields[0] != 'T' && fields[0] != 't'))
        return false;
    if (fields[0] == 'T')
        return true;
    /*
     * A tracing stop whose tracer the worker started itself is
     * LeakSanitizer's check at exit in a sanitizer build (its filter lets
     * that ptrace through, sandbox.c); the exit follows.  Any other tracer
     * stopped it.
     */
    char path[64];
    mxop__fmt(path, sizeof(path), "/proc/%d/status", (int)w->pid);
    FILE *f = fopen(path, "re");
    if (f == NULL)
        return true;
    int tracer = 0;
    char line[128];
    while (fgets(line, sizeof(line), f) != NULL)
        if (sscanf(line, "TracerPid: %d", &tracer) == 1)
            break;
    fclose(f);
    return tracer <= 0 || parent_of((pid_t)tracer) != w->pid;
}
