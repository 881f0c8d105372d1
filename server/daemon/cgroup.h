/*
 * server/daemon/cgroup.h - a cgroup per worker: memory counted with shared
 * mappings, a pid limit, and one kill for everything the worker started
 * (cgroup.c).
 */
#ifndef MXOP_SERVER_DAEMON_CGROUP_H
#define MXOP_SERVER_DAEMON_CGROUP_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "server/status_page.h"

/**
 * Moves the just-started worker `pid` into a cgroup of its own, limited to
 * `memory_mb` (+ the worker's own slack; 0: no memory limit) and
 * MXOP__CGROUP_PIDS_MAX tasks.  Called before the daemon sends the worker
 * anything, so no library runs outside it.  Under `--sandbox none`, or
 * where no cgroup can be had (not root, no memory controller), does
 * nothing; the first such case is logged once.
 */
void mxop__cgroup_enter(pid_t pid, const char *sandbox, uint64_t memory_mb);

/**
 * The worker `pid` was reaped: kills whatever is left in its cgroup,
 * notes in `page` (when the worker left no note of its own) that the
 * kernel killed it at the cgroup's memory limit, and removes the cgroup.
 */
bool mxop__cgroup_release(pid_t pid, mxop__status_page_t *page);

/** One phrase for the start-up log: the cgroup layout workers will get, or why none. */
const char *mxop__cgroup_describe(void);

/* Tasks (threads included) a worker's cgroup may hold. */
#define MXOP__CGROUP_PIDS_MAX 1024

/* What a worker may use beyond --worker-memory-mb: itself, its libraries, a sanitizer. */
#define MXOP__CGROUP_SLACK_MB 256

#endif /* MXOP_SERVER_DAEMON_CGROUP_H */
