/*
 * server/daemon/worker/cgroup.h - a cgroup per worker: memory counted with shared
 * mappings, a pid limit, and one kill for everything the worker started
 * (cgroup.c).
 */
#ifndef MXOP_SERVER_DAEMON_CGROUP_H
#define MXOP_SERVER_DAEMON_CGROUP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "shm/status_page.h"

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
 * `unasked_sigkill`: it died of a SIGKILL the daemon did not send, which
 * with a group that reached its limit is the limit's kill.
 */
bool mxop__cgroup_release(pid_t pid, mxop__status_page_t *page, bool unasked_sigkill);

/* Whether `pid` is in a worker's cgroup: the worker or anything its ops started. */
bool mxop__cgroup_holds_worker_process(pid_t pid);
/*
 * Whether workers get a cgroup of their own.  Without one the worker's
 * memory limit is RLIMIT_AS (mxop__cgroup_address_space_mb).
 */
bool mxop__cgroup_in_use(void);
/*
 * The address-space budget (MiB) a worker without a cgroup gets on top of
 * what it has mapped at start: its --worker-memory-mb plus twice the
 * session's region quota (a region may be mapped read-only and writable).
 * 0 (no RLIMIT_AS) when a cgroup is in use, there is no memory limit, or
 * the region quota is unlimited (RLIMIT_AS would then refuse regions).
 */
uint64_t mxop__cgroup_address_space_mb(uint64_t memory_mb, uint64_t region_quota_mb);

/* Tasks (threads included) a worker's cgroup may hold. */
#define MXOP__CGROUP_PIDS_MAX 1024

/* What a worker may use beyond --worker-memory-mb: itself, its libraries, a sanitizer. */
#define MXOP__CGROUP_SLACK_MB 256

#endif /* MXOP_SERVER_DAEMON_CGROUP_H */
