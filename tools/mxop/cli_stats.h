/*
 * tools/mxop/cli_stats.h - asking the daemon for its counters
 * (DaemonStats), shared by `mxop stats` and `mxop top` (cli_stats.c).
 */
#ifndef MXOP_TOOLS_CLI_STATS_H
#define MXOP_TOOLS_CLI_STATS_H

#include "tools/mxop/cli.h"

/*
 * Sends DaemonStats and returns 0 with *out its reply (free with mxop__reply__free_unpacked),
 * or an exit status after a sentence on stderr.
 */
int mxop__cli_get_stats(const char *prog, mxop__cli_conn_t *c, Mxop__Reply **out);

#endif /* MXOP_TOOLS_CLI_STATS_H */
