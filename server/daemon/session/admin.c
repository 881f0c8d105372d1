/*
 * server/daemon/session/admin.c - who may send daemon-wide requests.
 *
 * Any client of an allowed uid may open sessions; only an administrator
 * may do what affects other clients' sessions: Shutdown and Reload.  An
 * administrator is the daemon's own uid, root, or a uid given with
 * --admin-uid (which may also connect, as if given with --allow-uid).  A
 * process descended from a worker is never one: listener.c refuses it as
 * a client before it could ask anything.
 */
#include <stdio.h>

#include "common/util.h"
#include "mxop/errors.h"
#include "server/daemon/session/session.h"

bool mxop__client_is_admin(const mxop__daemon_t *d, const mxop__client_t *cl)
{
    if (cl->uid == d->euid || cl->uid == 0)
        return true;
    for (int i = 0; i < d->cfg.n_admin_uids; i++)
        if (d->cfg.admin_uids[i] == cl->uid)
            return true;
    return false;
}

int mxop__admin_refusal(const mxop__daemon_t *d, const mxop__client_t *cl, const char *what,
                        char *err, size_t errlen)
{
    mxop__fmt(err, errlen,
              "uid %u may not send %s: it is a daemon-wide request, for administrators only (uid "
              "%u, root, or a uid the daemon was started with --admin-uid for, e.g. "
              "--admin-uid %u)",
              (unsigned)cl->uid, what, (unsigned)d->euid, (unsigned)cl->uid);
    return MXOP_EDENIED;
}
