/*
 * server/daemon/worker/workeruid.h - which uid and gid workers run as (workeruid.c).
 */
#ifndef MXOP_SERVER_DAEMON_WORKERUID_H
#define MXOP_SERVER_DAEMON_WORKERUID_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "server/daemon/core/daemon.h"

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

#endif /* MXOP_SERVER_DAEMON_WORKERUID_H */
