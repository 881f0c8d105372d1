/*
 * tools/mxop/cli_stats.c - DaemonStats for `mxop stats` and `mxop top`.
 */
#include "tools/mxop/cli_stats.h"

#include "tools/mxop/commands.h"

int mxop__cli_get_stats(const char *prog, mxop__cli_conn_t *c, Mxop__Reply **out)
{
    Mxop__DaemonStats body = MXOP__DAEMON_STATS__INIT;
    Mxop__Request req = MXOP__REQUEST__INIT;
    req.body_case = MXOP__REQUEST__BODY_DAEMON_STATS;
    req.daemon_stats = &body;
    int rc = mxop__cli_request(prog, c, &req, out);
    if (rc != 0)
        return rc;
    if ((*out)->body_case != MXOP__REPLY__BODY_DAEMON_STATS) {
        fprintf(stderr, "mxop %s: the daemon answered without statistics\n", prog);
        mxop__reply__free_unpacked(*out, NULL);
        *out = NULL;
        return MXOP_CLI_EXIT_FAILED;
    }
    return 0;
}
