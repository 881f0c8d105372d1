/*
 * server/daemon/workeruid.h - which uid and gid workers run as (workeruid.c).
 */
#ifndef MXOP_SERVER_DAEMON_WORKERUID_H
#define MXOP_SERVER_DAEMON_WORKERUID_H

#include <stddef.h>

#include "server/daemon/daemon.h"

/* The uid and gid of the unprivileged account when the system has none named nobody. */
#define MXOP__WORKER_UID_FALLBACK 65534u

/**
 * Settles the workers' user once all options are read.  A daemon running
 * as root with no --worker-uid gives its workers the `nobody` account's
 * uid and the `nogroup` (else `nobody`, else the account's) gid, or 65534
 * for both where there is no such account, unless --sandbox none.  A
 * --worker-uid of 0 is refused unless --sandbox none.  Returns 0 or
 * MXOP_EINVAL with a sentence in err.
 */
int mxop__workeruid_settle(mxop__config_t *cfg, char *err, size_t errlen);

/** "uid U gid G (nobody, chosen by the daemon)" and the like, for the log and `mxop status`. */
void mxop__workeruid_describe(const mxop__config_t *cfg, char *out, size_t outlen);

#endif /* MXOP_SERVER_DAEMON_WORKERUID_H */
