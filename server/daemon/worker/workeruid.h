/*
 * server/daemon/worker/workeruid.h - which uid and gid workers run as (workeruid.c).
 */
#ifndef MXOP_SERVER_DAEMON_WORKERUID_H
#define MXOP_SERVER_DAEMON_WORKERUID_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "server/daemon/core/daemon.h"

/*
 * The default range of one-per-worker uids (a root daemon, no --worker-uid):
 * 0x6d780000 ("mx" << 16), 4096 of them.  --worker-uids FIRST:COUNT moves it.
 */
#define MXOP__WORKER_UID_FIRST 1836580864u
#define MXOP__WORKER_UID_COUNT 4096u

/**
 * Takes the value of `--worker-uids FIRST:COUNT`.  Returns 0, or
 * MXOP_EINVAL with a sentence in err.
 */
int mxop__workeruid_range_option(mxop__config_t *cfg, const char *val, char *err, size_t errlen);

/**
 * Settles the workers' user once all options are read.  A daemon running
 * as root with no --worker-uid gives each worker a uid (and the gid of the
 * same number) of its own from the range (--worker-uids, else
 * MXOP__WORKER_UID_FIRST and COUNT), unless --sandbox none; the range must
 * hold no account the system knows (its ends are checked).  A --worker-uid
 * of 0 is refused unless --sandbox none.  Returns 0 or MXOP_EINVAL with a
 * sentence in err.
 */
int mxop__workeruid_settle(mxop__config_t *cfg, char *err, size_t errlen);

/**
 * The uid and gid the next worker runs as: one of the range no live worker
 * holds (the least recently used), or the one --worker-uid gave.  Sets
 * *own to whether no other worker has that uid.  Returns 0, 1 when workers
 * keep the daemon's uid (not root, or --sandbox none), or MXOP_ELIMIT with
 * a sentence in err when every uid of the range is held.
 */
int mxop__workeruid_acquire(const mxop__config_t *cfg, uid_t *uid, gid_t *gid, bool *own, char *err,
                            size_t errlen);

/** Gives back a uid of the range once its worker is reaped (any other uid: nothing). */
void mxop__workeruid_release(const mxop__config_t *cfg, uid_t uid);

/** Whether `uid` is a workers' uid (of the range, or --worker-uid), never the daemon's own. */
bool mxop__workeruid_is_workers(const mxop__config_t *cfg, uid_t uid);

/** "uid U gid G (nobody, chosen by the daemon)" and the like, for the log and `mxop status`. */
void mxop__workeruid_describe(const mxop__config_t *cfg, char *out, size_t outlen);

#endif /* MXOP_SERVER_DAEMON_WORKERUID_H */
