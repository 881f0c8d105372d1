/*
 * server/daemon/core/introspect.h - what `mxop status` and `mxop stats` ask of
 * the daemon, the deaths it notes for them, and the Prometheus textfile
 * (--metrics-file) it writes (introspect.c, metrics.c).
 */
#ifndef MXOP_SERVER_DAEMON_INTROSPECT_H
#define MXOP_SERVER_DAEMON_INTROSPECT_H

#include <stddef.h>

#include "server/daemon/core/daemon.h"

/*
 * The Prometheus text exposition of every session's counters (the
 * administrator's view), malloc'd; NULL when out of memory.
 */
char *mxop__metrics_text(mxop__daemon_t *d);
/*
 * Takes --metrics-file PATH and --metrics-interval-ms N into cfg.
 * Returns 0, 1 when `opt` is another option, or MXOP_EINVAL with a sentence in err.
 */
int mxop__metrics_option(mxop__config_t *cfg, const char *opt, const char *val, char *err,
                         size_t errlen);
/* Starts writing --metrics-file every interval (nothing without one).  0 or MXOP_EINTERNAL. */
int mxop__metrics_start(mxop__daemon_t *d);
/* Writes the file once more and stops the timer (at shutdown).  Idempotent. */
void mxop__metrics_stop(mxop__daemon_t *d);

#endif /* MXOP_SERVER_DAEMON_INTROSPECT_H */
